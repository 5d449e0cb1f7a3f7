"""Reciprocal Rank Fusion of several teachers' rankings (LGAI-Embedding, seed 003, section 4.1).

score(d) = sum over rankers r of 1 / (k + rank_r(d)), rank 1-based, k = 60. A document a ranker did not rank
gets nothing from it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def rrf_scores(rankings: Sequence[Sequence[Hashable]], k: int = 60) -> dict[Hashable, float]:
    """Fused score of every document that appears in at least one ranking (best first in each ranking)."""
    if k <= 0:
        raise ValueError(f"RRF k must be positive, got {k}")
    fused: dict[Hashable, float] = {}
    for ranking in rankings:
        if len(set(ranking)) != len(ranking):
            raise ValueError("a ranking lists the same document twice")
        for rank, doc in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (k + rank)
    return fused


def rrf_fuse(rankings: Sequence[Sequence[Hashable]], k: int = 60) -> list[tuple[Hashable, float]]:
    """Documents with their fused scores, best first (ties keep first-seen order)."""
    fused = rrf_scores(rankings, k)
    return sorted(fused.items(), key=lambda item: -item[1])


def ranking_from_scores(ids: Sequence[Hashable], scores: np.ndarray) -> list[Hashable]:
    """One teacher's ranking of `ids` by its scores, best first; ties go to the smaller id, so a ranking never
    depends on the order candidates were gathered in."""
    order = np.lexsort((np.asarray(ids), -np.asarray(scores, dtype=np.float64)))
    return [ids[i] for i in order]
