"""Hold out part of the corpus-grounded queries as a BEIR-style retrieval set the evaluate stage can score.

A held-out query keeps its source document as the single relevant document (grade 1); the corpus is the whole
user collection, so evaluation measures whether a domain embedder finds the document its query was written for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from embedforge.data.beir import QRELS_HEADER
from embedforge.data.schema import CorpusDocument, Query


def is_heldout(doc_id: str, seed: int, fraction: float) -> bool:
    """A stable draw per document: the same documents are held out on every (resumed) run with this seed."""
    digest = hashlib.sha1(f"{seed}:heldout:{doc_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def write_beir(folder: Path, corpus: Iterable[CorpusDocument], queries: list[Query], relevant: dict[str, str]) -> None:
    """`corpus.jsonl` (written as `corpus` streams in), `queries.jsonl` and `qrels/test.tsv` (with header);
    `relevant` maps query id -> doc id."""
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for d in corpus:
            fh.write(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}, ensure_ascii=False) + "\n")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for q in queries:
            fh.write(json.dumps({"_id": q.query_id, "text": q.text}, ensure_ascii=False) + "\n")
    with (folder / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
        fh.write("\t".join(QRELS_HEADER) + "\n")
        for q in queries:
            fh.write(f"{q.query_id}\t{relevant[q.query_id]}\t1\n")
