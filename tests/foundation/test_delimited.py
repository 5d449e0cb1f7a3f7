"""The pyarrow.csv readers keep the exact row checks: fields split literally, blank lines skipped, every error
naming the file and the line, wider accepted rows kept in file order, and quoted CSV read as the csv module does."""

from __future__ import annotations

import csv

import pytest

from embedforge.data.delimited import DataFormatError, read_csv, read_tsv


def _rows(rows, width):
    return [[rows.column(c)[i] for c in range(width)] for i in range(len(rows))]


def test_tsv_splits_literally_and_skips_blank_lines_with_exact_line_numbers(tmp_path):
    path = tmp_path / "pairs.tsv"
    # line 1 header; 3 empty; 5 spaces; 7 tabs only (blank fields); 8 CRLF; quotes are text, never quoting
    path.write_bytes(
        b'a\tb\tscore\n"quoted\tx\t1\n\nsecond\t"y\t2\n   \nthird\tz\t3.5\n\t\t\nfourth\tw\t4\r\nfifth\tv\tbad\n'
    )
    rows = read_tsv(path, (3,), header=["a", "b", "score"])
    assert _rows(rows, 3) == [
        ['"quoted', "x", "1"],
        ["second", '"y', "2"],
        ["third", "z", "3.5"],
        ["fourth", "w", "4"],
        ["fifth", "v", "bad"],
    ]
    assert [rows.line(i) for i in range(len(rows))] == [2, 4, 6, 8, 9]
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:9: score 'bad' is not a number"):
        rows.floats(2, "score")


def test_tsv_field_count_and_header_errors_name_the_line(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a\tb\n\nx\ty\nonly one field\nz\tw\n")
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:4: expected 2 tab-separated fields, found 1"):
        read_tsv(path, (2,), skip_header=True)
    with pytest.raises(DataFormatError, match=r"pairs\.tsv:1: expected header \['text', 'label'\]"):
        read_tsv(path, (2,), header=["text", "label"])


def test_tsv_wider_accepted_rows_stay_in_file_order(tmp_path):
    path = tmp_path / "sts.tsv"
    lines = [
        "g\tf\t1\ta\t0.5\tone\tuno",
        "g\tf\t2\tb\t1.5\ttwo\tdos\textra\tsource",
        "",
        "g\tf\t3\tc\t2.5\tthree\ttres",
    ]
    path.write_text("\n".join(lines) + "\n")
    rows = read_tsv(path, (7, 9))
    assert rows.column(5) == ["one", "two", "three"]
    assert rows.floats(4, "score") == [0.5, 1.5, 2.5]
    assert [rows.line(i) for i in range(3)] == [1, 2, 4]
    with pytest.raises(DataFormatError, match=r"sts\.tsv:2: label 'two' is not one or uno"):
        rows.require_values(5, ("one", "uno"), "label")


def test_floats_follow_pythons_grammar_where_arrow_refuses(tmp_path):
    path = tmp_path / "scores.tsv"
    path.write_text("x\t 1.25 \ny\t1e3\nz\t-inf\n")
    assert read_tsv(path, (2,)).floats(1, "score") == [1.25, 1000.0, float("-inf")]


def test_csv_reads_what_the_csv_module_reads_and_names_the_start_line(tmp_path):
    path = tmp_path / "texts.csv"
    text = 'text,label\n"a, with comma",x\n\n"multi\nline ""quoted""",y\nplain "inner" quote,z\n,empty\n'
    path.write_text(text)
    rows = read_csv(path, ["text", "label"])
    with path.open(newline="") as fh:
        expected = [r for r in list(csv.reader(fh))[1:] if r]
    assert _rows(rows, 2) == expected
    assert [rows.line(i) for i in range(len(rows))] == [2, 4, 6, 7]
    assert str(rows.fail(2, "bad")) == f"{path}:6: bad"
    path.write_text(text + "one,two,three\n")
    with pytest.raises(DataFormatError, match=r"texts\.csv:8: expected 2 comma-separated fields"):
        read_csv(path, ["text", "label"])


def test_undecodable_or_empty_files(tmp_path):
    path = tmp_path / "bytes.tsv"
    path.write_bytes(b"a\tb\n\xff\xfe\tx\n")
    with pytest.raises(DataFormatError, match=r"bytes\.tsv: .*UTF8"):
        read_tsv(path, (2,), skip_header=True)
    path.write_bytes(b"")
    assert len(read_tsv(path, (2,))) == 0
