"""Fusion of several teachers' scores of one query's documents.

- Reciprocal Rank Fusion (LGAI-Embedding, seed 003, section 4.1): score(d) = sum over rankers r of
  1 / (k + rank_r(d)), rank 1-based, k = 60. A document a ranker did not rank gets nothing from it. Only ranks
  survive: a candidate far behind the first and one just behind it get the same step.
- Standardized mean (CombSUM of z-scores; Fox and Shaw, "Combination of Multiple Searches", TREC-2 1994, with
  Montague and Aslam's score normalisation, CIKM 2001): each teacher's scores are standardised over the query's
  documents, (s - mean) / sd, and averaged, so teachers on different scales weigh alike and the fused scores keep
  each teacher's margins, as GPL's pseudo labels keep the cross-encoder's (Wang et al. 2022, Margin-MSE).
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


def standardized_mean(teacher_scores: Sequence[np.ndarray], weights: Sequence[float] | None = None) -> np.ndarray:
    """The mean over teachers (weighted by `weights`, equal by default) of each one's scores standardised along the
    last axis (a teacher whose scores are all equal adds 0); every array has the same shape, the documents on the
    last axis."""
    stacked = np.stack([np.asarray(s, dtype=np.float64) for s in teacher_scores])
    spread = stacked.std(axis=-1, keepdims=True)
    z = (stacked - stacked.mean(axis=-1, keepdims=True)) / np.where(spread > 0, spread, 1.0)
    return np.average(z, axis=0, weights=weights)


def fuse(ids: Sequence[Hashable], teacher_scores: Sequence[np.ndarray], method: str, k: int = 60) -> np.ndarray:
    """Fused scores of `ids` from each teacher's scores of them (aligned with `ids`): `rrf` or `standardized_mean`;
    one teacher's scores are returned as they are."""
    if len(teacher_scores) == 1:
        return np.asarray(teacher_scores[0], dtype=np.float64)
    if method == "standardized_mean":
        return standardized_mean(teacher_scores)
    if method != "rrf":
        raise ValueError(f"unknown fusion {method!r}: rrf or standardized_mean")
    fused = rrf_scores([ranking_from_scores(ids, s) for s in teacher_scores], k)
    return np.array([fused[d] for d in ids], dtype=np.float64)


def ranking_from_scores(ids: Sequence[Hashable], scores: np.ndarray) -> list[Hashable]:
    """One teacher's ranking of `ids` by its scores, best first; ties go to the smaller id, so a ranking never
    depends on the order candidates were gathered in."""
    order = np.lexsort((np.asarray(ids), -np.asarray(scores, dtype=np.float64)))
    return [ids[i] for i in order]
