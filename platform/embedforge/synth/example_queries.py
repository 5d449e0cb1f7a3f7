"""A user's own queries as the generator's few-shot demonstrations (query style `examples`).

Promptagator (Dai et al. 2023) 3.1 prompts the generator with a handful of the task's real queries, each beside its
document, so the queries it writes take the task's own form (a keyword string, an entity name, a spoken question)
instead of one generic style. A user often holds a few real queries but not their judgments: each is paired here with
the passage BM25 ranks first for it in the collection, a lexical match that shows the generator how the collection's
queries relate to their documents.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from embedforge.data.beir import read_beir_queries
from embedforge.data.delimited import DataFormatError
from embedforge.data.schema import CorpusDocument
from embedforge.mine.teachers.lexical import BM25Teacher

EXAMPLES_STYLE = "examples"
EXAMPLES_STYLE_TEXT = "a query written the way this collection's own users write theirs"
DEMONSTRATION_CHARS = 300  # a demonstration's document in the prompt; the prompted document keeps its own limit


def read_example_queries(path: Path) -> list[str]:
    """The queries of `path`: a BEIR queries file (`.jsonl`, rows with `_id` and `text`) or one query per line."""
    if not path.is_file():
        raise FileNotFoundError(f"synth.example_queries: {path} does not exist")
    if path.suffix == ".jsonl":
        queries = [q.text.strip() for q in read_beir_queries(path)]
    else:
        queries = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    queries = [q for q in queries if q]
    if not queries:
        raise DataFormatError(f"{path}: no example queries (a BEIR queries .jsonl, or one query per line)")
    return queries


def clipped(text: str, limit: int) -> str:
    """`text` on one line, cut at the last word boundary within `limit` characters."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[:limit]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def example_demonstrations(
    queries: Sequence[str], collection: Sequence[CorpusDocument], limit: int, seed: str
) -> tuple[dict[str, str], ...]:
    """Up to `limit` of `queries` (a seeded sample, in file order), each with the document BM25 ranks first for it
    in `collection`: demonstrations {"document", "examples", "doc_id"} for `QueryPrompts.with_examples`."""
    if not collection:
        raise ValueError("example queries need a non-empty collection to pair them with")
    picked = sorted(random.Random(seed).sample(range(len(queries)), min(limit, len(queries))))
    bm25 = BM25Teacher([doc.embedded_text for doc in collection])
    demos = []
    for i in picked:
        _, ids = bm25.top_k(queries[i], 1)
        doc = collection[int(ids[0])]
        shown = clipped(doc.embedded_text, DEMONSTRATION_CHARS)
        demos.append({"document": shown, EXAMPLES_STYLE: queries[i], "doc_id": doc.doc_id})
    return tuple(demos)
