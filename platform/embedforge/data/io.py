"""Read and write schema records as Parquet or JSONL (atomically), in a form Ray Data reads directly."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from embedforge.data.schema import SCHEMAS, _plain

R = TypeVar("R")


def records_to_table(records: Iterable[Any], cls: type) -> pa.Table:
    rows = [asdict(r) for r in records]
    return pa.Table.from_pylist(rows, schema=SCHEMAS[cls])


def table_to_records(table: pa.Table, cls: type[R]) -> list[R]:
    names = [f.name for f in fields(cls)]
    missing = [n for n in names if n not in table.column_names and _required(cls, n)]
    if missing:
        raise ValueError(f"table lacks required column(s) {missing} for {cls.__name__}")
    out = []
    for row in table.to_pylist():
        out.append(cls(**{k: _plain(v) for k, v in row.items() if k in names}))
    return out


def _required(cls: type, name: str) -> bool:
    from dataclasses import MISSING

    f = next(f for f in fields(cls) if f.name == name)
    return f.default is MISSING and f.default_factory is MISSING


def _atomic_target(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def write_parquet(records: Iterable[Any], path: str | Path, cls: type) -> int:
    """Write records of dataclass `cls` to one Parquet file atomically; returns the row count."""
    path = Path(path)
    table = records_to_table(records, cls)
    tmp = _atomic_target(path)
    pq.write_table(table, tmp)
    tmp.replace(path)
    return table.num_rows


def read_parquet(path: str | Path, cls: type[R]) -> list[R]:
    """Read one Parquet file, or every `*.parquet` under a folder (sorted), into records of `cls`."""
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    records: list[R] = []
    for f in files:
        if f.name.startswith("."):
            continue
        records.extend(table_to_records(pq.read_table(f), cls))
    return records


def write_jsonl(records: Iterable[Any], path: str | Path) -> int:
    path = Path(path)
    tmp = _atomic_target(path)
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(asdict(r), ensure_ascii=False) + "\n")
            n += 1
    tmp.replace(path)
    return n


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; a bad line fails naming file and line."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{path}:{lineno}: invalid JSON ({err.msg})") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def read_jsonl(path: str | Path, cls: type[R]) -> list[R]:
    names = {f.name for f in fields(cls)}
    out = []
    for lineno, obj in iter_jsonl(path):
        try:
            out.append(cls(**{k: v for k, v in obj.items() if k in names}))
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}:{lineno}: not a valid {cls.__name__}: {err}") from None
    return out
