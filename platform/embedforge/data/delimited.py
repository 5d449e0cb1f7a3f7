"""Readers for the delimited text files in the shared data and in users' evaluation files, parsed by `pyarrow.csv`.

Several shared TSV files contain `"` characters but use no quoting at all (MANIFEST.md), so TSV files are parsed
with quoting off: a row is its line split on tabs, literally. The two CSV files use standard CSV quoting and are
parsed with it. The checks stay exact: a header must match, a row with a field count outside the accepted widths
fails naming the file and its line, blank lines are skipped, and a consumer's own check on a value
(`DelimitedRows.fail`) names the line of that row.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv


class DataFormatError(ValueError):
    """A data file with a row that does not have the expected shape; the message names the file and line."""


def _check_header(path: Path, found: list[str], expected: list[str] | None) -> None:
    if expected is not None and [h.strip() for h in found] != expected:
        raise DataFormatError(f"{path}:1: expected header {expected}, found {found}")


class DelimitedRows:
    """The rows of one delimited file, column by column (`column(i)`: the i-th field of every row, as `str`),
    with the line each row starts on, for error messages."""

    def __init__(self, path: Path, columns: list[pa.ChunkedArray | list[str]], line_of: Callable[[int], int]) -> None:
        self.path = path
        self._columns = columns
        self._line_of = line_of
        self._lists: dict[int, list[str]] = {}

    def __len__(self) -> int:
        return len(self._columns[0]) if self._columns else 0

    def column(self, index: int) -> list[str]:
        if index not in self._lists:
            values = self._columns[index]
            # through NumPy's object array: a third faster than `to_pylist`, the same `str` values
            self._lists[index] = values if isinstance(values, list) else values.to_numpy().tolist()
        return self._lists[index]

    def line(self, row: int) -> int:
        return self._line_of(row)

    def fail(self, row: int, message: str) -> DataFormatError:
        """The error for `row`, naming the file and the row's line: `raise rows.fail(i, "...")`."""
        return DataFormatError(f"{self.path}:{self.line(row)}: {message}")

    def floats(self, index: int, what: str) -> list[float]:
        """The column as numbers (Python's `float` grammar); the first value that is not one fails with its line."""
        values = self._columns[index]
        if not isinstance(values, list):
            try:
                return pc.cast(values, pa.float64()).to_pylist()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # a value Arrow does not parse: Python's grammar decides, and names the line if it fails too
        return [parse_float(self.path, self.line(i), value, what) for i, value in enumerate(self.column(index))]

    def require_values(self, index: int, allowed: Collection[str], what: str) -> list[str]:
        """The column, failing at the first value outside `allowed` with `<what> '<value>' is not one of ...`."""
        values = self.column(index)
        for i, value in enumerate(values):
            if value not in allowed:
                shown = " or ".join(sorted(allowed)) if len(allowed) <= 2 else f"one of {sorted(allowed)}"
                raise self.fail(i, f"{what} {value!r} is not {shown}")
        return values


def first_line(path: Path) -> str:
    """The file's first line without its line break; a first line that is not UTF-8 fails naming the file."""
    with path.open("rb") as fh:
        line = fh.readline()
    try:
        return line.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise DataFormatError(f"{path}:1: not UTF-8 text ({err.reason})") from None


def _arrow_read(path: Path, names: list[str], skip_rows: int, parse: pacsv.ParseOptions) -> pa.Table:
    """Every field as a string (never null), rows in file order so that invalid rows come with their line."""
    convert = pacsv.ConvertOptions(
        column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False, quoted_strings_can_be_null=False
    )
    read = pacsv.ReadOptions(column_names=names, skip_rows=skip_rows, use_threads=False)
    try:
        # from the file's bytes in memory: Arrow's file stream reads in blocks, ~1.5x slower on files of a few MB
        source = pa.BufferReader(path.read_bytes())
        return pacsv.read_csv(source, read_options=read, parse_options=parse, convert_options=convert)
    except pa.ArrowInvalid as err:
        if str(err).startswith("Empty CSV file"):
            return pa.table({name: pa.array([], pa.string()) for name in names})
        raise DataFormatError(f"{path}: {err}") from None


def _row_lines(rows: int, first_line: int, skipped: list[int]) -> np.ndarray:
    """Line of each parsed row: the lines from `first_line` on, in order, less the `skipped` ones (sorted)."""
    # rank of each skipped line among the kept ones: a row at or past that rank sits one line further down
    ranks = np.asarray(skipped, dtype=np.int64) - first_line - np.arange(len(skipped), dtype=np.int64)
    index = np.arange(rows, dtype=np.int64)
    return first_line + index + np.searchsorted(ranks, index, side="right")


def read_tsv(
    path: Path, widths: tuple[int, ...], header: list[str] | None = None, skip_header: bool = False
) -> DelimitedRows:
    """Every non-blank line of a tab-separated file with no quoting, split on tabs.

    `widths` are the accepted field counts (a wider accepted row keeps its first `min(widths)` fields);
    `header` (checked) or `skip_header` drop the first line. A row of another width fails naming its line.
    """
    has_header = header is not None or skip_header
    if has_header:
        _check_header(path, first_line(path).split("\t"), header)
    narrow = min(widths)
    names = [f"f{i}" for i in range(narrow)]
    wider: list[tuple[int, list[str]]] = []
    skipped: list[int] = []
    bad: list[tuple[int, int]] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        text = row.text.rstrip("\r")
        if row.actual_columns in widths:
            wider.append((row.number, text.split("\t")[:narrow]))
            skipped.append(row.number)
        elif not text.strip():
            skipped.append(row.number)
        elif not bad:
            bad.append((row.number, row.actual_columns))
        return "skip"

    table = _arrow_read(
        path,
        names,
        int(has_header),
        pacsv.ParseOptions(delimiter="\t", quote_char=False, ignore_empty_lines=False, invalid_row_handler=on_invalid),
    )
    if bad:
        line, found = bad[0]
        accepted = " or ".join(map(str, widths))
        raise DataFormatError(f"{path}:{line}: expected {accepted} tab-separated fields, found {found}")
    lines = _row_lines(table.num_rows, 1 + int(has_header), sorted(skipped))
    table, lines = _drop_blank_rows(table, lines)
    if not wider:
        return DelimitedRows(path, list(table.columns), lambda i: int(lines[i]))
    all_lines = np.concatenate([lines, np.asarray([n for n, _ in wider], dtype=np.int64)])
    order = np.argsort(all_lines, kind="stable")
    take = pa.array(order)
    columns = [
        pa.chunked_array([*table.column(c).chunks, pa.array([f[c] for _, f in wider], pa.string())]).take(take)
        for c in range(narrow)
    ]
    merged = all_lines[order]
    return DelimitedRows(path, columns, lambda i: int(merged[i]))


def _drop_blank_rows(table: pa.Table, lines: np.ndarray) -> tuple[pa.Table, np.ndarray]:
    """Arrow reads an empty line as a row of empty fields (and a line of tabs as one of blank fields): drop them."""
    if table.num_rows == 0:
        return table, lines
    candidates = pc.equal(pc.utf8_trim_whitespace(table.column(0)), "")
    if not pc.any(candidates).as_py():
        return table, lines
    rows = np.flatnonzero(candidates.to_numpy(zero_copy_only=False))
    blank = [int(i) for i in rows if all(not table.column(c)[int(i)].as_py().strip() for c in range(table.num_columns))]
    keep = np.ones(table.num_rows, dtype=bool)
    keep[blank] = False
    return table.filter(pa.array(keep)), lines[keep]


def read_csv(path: Path, header: list[str]) -> DelimitedRows:
    """Every non-blank row of a quoted CSV file whose first row is `header`; a row of another width fails naming
    the line it starts on."""
    first = next(csv.reader([first_line(path)]), [])
    if not first:
        raise DataFormatError(f"{path}:1: empty file, expected header {header}")
    _check_header(path, first, header)
    names = [f"f{i}" for i in range(len(header))]
    bad: list[int] = []

    def on_invalid(row: pacsv.InvalidRow) -> str:
        bad.append(row.actual_columns)
        return "skip"

    table = _arrow_read(path, names, 1, pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=on_invalid))
    if bad:
        # a quoted value may span lines: the csv module finds the line the bad row starts on
        line, found = next((n, len(r)) for n, r in _csv_rows(path) if len(r) != len(header))
        raise DataFormatError(f"{path}:{line}: expected {len(header)} comma-separated fields {header}, found {found}")
    return DelimitedRows(path, list(table.columns), lambda i: _csv_row_line(path, i))


def _csv_rows(path: Path) -> list[tuple[int, list[str]]]:
    """(line the row starts on, fields) of every non-blank row after the header, by the csv module."""
    out = []
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        start = reader.line_num + 1
        for row in reader:
            if row:
                out.append((start, row))
            start = reader.line_num + 1
    return out


def _csv_row_line(path: Path, row: int) -> int:
    return _csv_rows(path)[row][0]


def parse_float(path: Path, lineno: int, value: str, what: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise DataFormatError(f"{path}:{lineno}: {what} {value!r} is not a number") from None


def require_text(path: Path, lineno: int, value: str, what: str) -> str:
    text = value.strip()
    if not text:
        raise DataFormatError(f"{path}:{lineno}: empty {what}")
    return text
