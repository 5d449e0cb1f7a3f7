"""BM25 as a lexical teacher (through bm25s), for hybrid mining fused with dense rankings by RRF (LGAI 4.1)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class BM25Teacher:
    """A BM25 index over the corpus; `scores(query)` gives every document's score (English stop words)."""

    def __init__(self, corpus: Sequence[str]) -> None:
        if not corpus:
            raise ValueError("BM25 needs a non-empty corpus")
        import bm25s  # with numba and scipy about 90 MiB: loaded by runs with a BM25 teacher, not by every miner

        self.tokenize = bm25s.tokenize
        self.retriever = bm25s.BM25()
        self.retriever.index(bm25s.tokenize(list(corpus), stopwords="en", show_progress=False), show_progress=False)
        self.size = len(corpus)

    def scores(self, query: str) -> np.ndarray:
        tokens = self.tokenize([query], stopwords="en", return_ids=False, show_progress=False)[0]
        if not tokens:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self.retriever.get_scores(tokens), dtype=np.float32)

    def top_k(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, ids) of the k best documents, best first."""
        scores = self.scores(query)
        k = min(k, self.size)
        ids = np.argpartition(-scores, k - 1)[:k]
        ids = ids[np.argsort(-scores[ids], kind="stable")]
        return scores[ids], ids
