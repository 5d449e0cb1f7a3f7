"""Line readers for the delimited text files in the shared data, failing with the file and line of a bad row.

Several shared TSV files contain `"` characters but use no quoting at all (MANIFEST.md), so TSV rows are split
on tabs literally; the two CSV files do use standard CSV quoting and go through the `csv` module.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path


class DataFormatError(ValueError):
    """A data file with a row that does not have the expected shape; the message names the file and line."""


def _check_header(path: Path, found: list[str], expected: list[str] | None) -> None:
    if expected is not None and [h.strip() for h in found] != expected:
        raise DataFormatError(f"{path}:1: expected header {expected}, found {found}")


def iter_tsv(
    path: Path, widths: tuple[int, ...], header: list[str] | None = None, skip_header: bool = False
) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) for each non-blank line split on tabs with no quoting.

    `widths` are the accepted field counts; `header` (checked) or `skip_header` drop the first line.
    """
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            parts = line.rstrip("\r\n").split("\t")
            if lineno == 1 and (header is not None or skip_header):
                _check_header(path, parts, header)
                continue
            if not line.strip():
                continue
            if len(parts) not in widths:
                raise DataFormatError(
                    f"{path}:{lineno}: expected {' or '.join(map(str, widths))} tab-separated "
                    f"fields, found {len(parts)}"
                )
            yield lineno, parts


def iter_csv(path: Path, header: list[str]) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number of the row's start, fields) for a quoted CSV file whose first row is `header`."""
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        first = next(reader, None)
        if first is None:
            raise DataFormatError(f"{path}:1: empty file, expected header {header}")
        _check_header(path, first, header)
        start = reader.line_num + 1
        for row in reader:
            if row:
                if len(row) != len(header):
                    raise DataFormatError(
                        f"{path}:{start}: expected {len(header)} comma-separated fields {header}, found {len(row)}"
                    )
                yield start, row
            start = reader.line_num + 1


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
