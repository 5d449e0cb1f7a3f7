"""Rocchio pseudo-relevance feedback on dense query vectors (config `mine.teachers[].feedback`).

q' = normalise(q + weight * mean(d_1 .. d_depth)), where d_1 .. d_depth are the teacher's own top documents for q
(Rocchio 1971; applied to dense retrievers' vectors by Li et al., TOIS 2023). A teacher whose queries are fed back
this way ranks the collection closer to what it holds on each query's subject; a student distilled from it learns
that in its query encoder, where no feedback search runs at inference.
"""

from __future__ import annotations

import numpy as np

from embedforge.config.mine import FeedbackConfig
from embedforge.mine.index import SearchIndex, search


def rocchio(queries: np.ndarray, feedback: np.ndarray, valid: np.ndarray, weight: float) -> np.ndarray:
    """Expanded, L2-normalised query vectors. `feedback` (n, depth, dim) holds each query's feedback documents;
    `valid` (n, depth) marks the rows that are documents (a corpus may hold fewer than `depth`)."""
    weights = valid.astype(np.float32)
    mean = np.einsum("nkd,nk->nd", feedback, weights) / np.maximum(weights.sum(axis=1), 1)[:, None]
    expanded = queries + weight * mean
    return (expanded / np.maximum(np.linalg.norm(expanded, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def expand_queries(
    queries: np.ndarray, index: SearchIndex, doc_vectors: np.ndarray, config: FeedbackConfig
) -> np.ndarray:
    """`queries` fed back with their top `config.depth` documents in `index` (row i of `doc_vectors` is id i;
    a memory map is read only at the rows fed back)."""
    _, ids = search(index, queries, config.depth)
    valid = ids >= 0
    rows = np.where(valid, ids, 0).ravel()
    feedback = np.asarray(doc_vectors[rows], dtype=np.float32).reshape(*ids.shape, -1)
    return rocchio(np.asarray(queries, dtype=np.float32), feedback, valid, config.weight)
