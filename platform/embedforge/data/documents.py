"""A user's own document collection -> `CorpusDocument`s: a JSONL file, a Parquet file, or a folder of .txt files.

JSONL rows and Parquet rows need a `text` field and may have an id (`doc_id`, `_id` or `id`) and a `title`;
a missing id becomes the row number. A text file's id is its path relative to the folder, its title the stem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from embedforge.data.delimited import DataFormatError
from embedforge.data.io import iter_jsonl
from embedforge.data.schema import CorpusDocument

_ID_KEYS = ("doc_id", "_id", "id")


def _document(where: str, index: int, row: dict[str, Any]) -> CorpusDocument:
    text = row.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DataFormatError(f"{where}: missing or empty 'text'")
    doc_id = next((str(row[k]) for k in _ID_KEYS if row.get(k) is not None), str(index))
    return CorpusDocument(doc_id=doc_id, text=text, title=str(row.get("title") or ""))


def read_documents(path: str | Path) -> list[CorpusDocument]:
    """Read a document collection; fails naming the file (and line) of a bad record or a duplicate id."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise FileNotFoundError(f"{path}: folder has no .txt documents")
        docs = [
            _document(
                str(f), i, {"doc_id": str(f.relative_to(path)), "title": f.stem, "text": f.read_text(encoding="utf-8")}
            )
            for i, f in enumerate(files)
        ]
    elif path.suffix == ".jsonl":
        docs = [_document(f"{path}:{n}", n, obj) for n, obj in iter_jsonl(path)]
    elif path.suffix == ".parquet":
        docs = [_document(f"{path}: row {i}", i, row) for i, row in enumerate(pq.read_table(path).to_pylist())]
    elif not path.exists():
        raise FileNotFoundError(f"document collection {path} does not exist")
    else:
        raise ValueError(f"{path}: documents must be a .jsonl file, a .parquet file or a folder of .txt files")
    seen: set[str] = set()
    for d in docs:
        if d.doc_id in seen:
            raise DataFormatError(f"{path}: duplicate document id {d.doc_id!r}")
        seen.add(d.doc_id)
    return docs
