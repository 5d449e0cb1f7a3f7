"""A user's own document collection -> `CorpusDocument`s: a JSONL file, a Parquet file, or a folder of .txt files.

JSONL rows and Parquet rows need a `text` field and may have an id (`doc_id`, `_id` or `id`) and a `title`;
a missing id becomes the row number. A text file's id is its path relative to the folder, its title the stem.
Collections are read as streams (one document, or one Parquet record batch, at a time), so sampling a collection
or copying it holds only the ids seen so far and the documents kept, not the collection.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from embedforge.data.delimited import DataFormatError
from embedforge.data.io import iter_jsonl
from embedforge.data.schema import CorpusDocument

_ID_KEYS = ("doc_id", "_id", "id")
_PARQUET_BATCH_ROWS = 1024


def _document(where: str, index: int, row: dict[str, Any]) -> CorpusDocument:
    text = row.get("text")
    if not isinstance(text, str) or not text.strip():
        raise DataFormatError(f"{where}: missing or empty 'text'")
    doc_id = next((str(row[k]) for k in _ID_KEYS if row.get(k) is not None), str(index))
    return CorpusDocument(doc_id=doc_id, text=text, title=str(row.get("title") or ""))


def _records(path: Path) -> Iterator[CorpusDocument]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise FileNotFoundError(f"{path}: folder has no .txt documents")
        for i, f in enumerate(files):
            row = {"doc_id": str(f.relative_to(path)), "title": f.stem, "text": f.read_text(encoding="utf-8")}
            yield _document(str(f), i, row)
    elif path.suffix == ".jsonl":
        for n, obj in iter_jsonl(path):
            yield _document(f"{path}:{n}", n, obj)
    elif path.suffix == ".parquet":
        index = 0
        for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH_ROWS):
            for row in batch.to_pylist():
                yield _document(f"{path}: row {index}", index, row)
                index += 1
    elif not path.exists():
        raise FileNotFoundError(f"document collection {path} does not exist")
    else:
        raise ValueError(f"{path}: documents must be a .jsonl file, a .parquet file or a folder of .txt files")


def iter_documents(path: str | Path) -> Iterator[CorpusDocument]:
    """Stream a document collection; fails naming the file (and line) of a bad record or a duplicate id."""
    path = Path(path)
    seen: set[str] = set()
    for doc in _records(path):
        if doc.doc_id in seen:
            raise DataFormatError(f"{path}: duplicate document id {doc.doc_id!r}")
        seen.add(doc.doc_id)
        yield doc


def read_documents(path: str | Path) -> list[CorpusDocument]:
    """The whole collection in memory (for callers that embed or index all of it at once)."""
    return list(iter_documents(path))


def collection_texts(ref: str) -> list[str]:
    """The texts a collection (`mine.corpus`, relative to the data dir) is embedded as: `title text` per document
    (`CorpusDocument.embedded_text`), in collection order."""
    from embedforge.paths import resolve_data_path

    return [d.embedded_text for d in iter_documents(resolve_data_path(ref))]


def sample_documents(path: str | Path, limit: int | None, seed: str) -> tuple[int, list[CorpusDocument]]:
    """(size of the collection, a seed-stable sample of `limit` documents in collection order), in two passes.

    The first pass counts and checks every record; the second keeps the drawn ones. `limit` None or at least
    the collection's size keeps every document."""
    total = sum(1 for _ in iter_documents(path))
    if not limit or limit >= total:
        return total, read_documents(path)
    picked = set(random.Random(seed).sample(range(total), limit))
    return total, [doc for i, doc in enumerate(iter_documents(path)) if i in picked]
