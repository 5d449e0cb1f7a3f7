"""Mine one pool's queries: retrieve candidates with every retrieving teacher (faiss for dense teachers, BM25),
score the union of candidates and the query's positives with every teacher, fuse them when there are several
teachers (`mine.fusion`: RRF, LGAI 4.1, or the standardized mean; one teacher's raw scores are used as they are),
then select negatives positive-aware (NV-Embed 4.1.1). The fused scores of the positive and the kept negatives are
the soft labels (LGAI 4.3), or one teacher's own scores (`mine.soft_labels_from`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from embedforge.config.mine import MineConfig
from embedforge.mine.fusion import fuse
from embedforge.mine.index import SearchIndex, search
from embedforge.mine.pools import MiningPool, QueryKey
from embedforge.mine.selection import Selection, select_negatives
from embedforge.mine.teachers.lexical import BM25Teacher
from embedforge.mine.teachers.pairwise import PairScorer


@dataclass
class DenseView:
    """A dense teacher over one pool: corpus vectors (a memory map), their faiss index (or block-by-block exact
    search), and query vectors (fed back, `mine.feedback`, when the teacher's `feedback` is set)."""

    doc_vectors: np.ndarray
    index: SearchIndex
    query_vectors: Callable[[Sequence[QueryKey]], np.ndarray]


@dataclass
class QueryResult:
    selection: Selection
    candidate_ids: list[int]  # corpus ids of the kept negatives, best first
    scores: dict[int, float]  # fused score of every scored document (positives included)
    labels: dict[int, float] | None = None  # `mine.soft_labels_from`'s own scores; None: `scores` are the labels


class PoolMiner:
    def __init__(
        self,
        pool: MiningPool,
        config: MineConfig,
        dense: Sequence[DenseView] = (),
        bm25: BM25Teacher | None = None,
        pair_scorers: Sequence[PairScorer] = (),
    ) -> None:
        if not dense and bm25 is None:
            raise ValueError("mining needs a retrieving teacher (dense or bm25)")
        self.pool, self.config = pool, config
        self.dense, self.bm25, self.pair_scorers = list(dense), bm25, list(pair_scorers)
        self.label_position = config.soft_label_position()

    def _retrieve(
        self, keys: Sequence[QueryKey], queries: list[np.ndarray]
    ) -> tuple[list[dict[int, None]], list[np.ndarray]]:
        """Candidate ids per query (insertion-ordered union) and each query's BM25 scores over the corpus;
        `queries` holds each dense view's query vectors."""
        depth = self.config.selection.candidate_k + 1 + max(len(self.pool.positives[k]) for k in keys)
        unions: list[dict[int, None]] = [dict.fromkeys(self.pool.positives[k]) for k in keys]
        for view, vectors in zip(self.dense, queries, strict=True):
            _, ids = search(view.index, vectors, depth)
            for union, row in zip(unions, ids, strict=True):
                union.update(dict.fromkeys(int(i) for i in row if i >= 0))
        bm25_scores: list[np.ndarray] = []
        if self.bm25 is not None:
            for union, (_, query) in zip(unions, keys, strict=True):
                scores = self.bm25.scores(query)
                bm25_scores.append(scores)
                top = np.argsort(-scores, kind="stable")[:depth]
                union.update(dict.fromkeys(int(i) for i in top))
        return unions, bm25_scores

    def _teacher_scores(
        self,
        keys: Sequence[QueryKey],
        queries: list[np.ndarray],
        unions: list[list[int]],
        bm25_scores: list[np.ndarray],
    ) -> list[list[np.ndarray]]:
        """Per query, one score array over its union per teacher (dense, then BM25, then pairwise)."""
        per_query: list[list[np.ndarray]] = [[] for _ in keys]
        for view, q in zip(self.dense, queries, strict=True):
            for i, ids in enumerate(unions):
                docs = np.asarray(view.doc_vectors[np.sort(ids)], dtype=np.float32)
                order = np.argsort(np.argsort(ids))  # rows of the sorted gather back to union order
                per_query[i].append(docs[order] @ q[i])
        for i, scores in enumerate(bm25_scores):
            per_query[i].append(scores[unions[i]])
        for scorer in self.pair_scorers:
            pairs = [(key[1], self.pool.corpus[d]) for key, ids in zip(keys, unions, strict=True) for d in ids]
            flat = scorer.score(pairs)
            offset = 0
            for i, ids in enumerate(unions):
                per_query[i].append(flat[offset : offset + len(ids)])
                offset += len(ids)
        return per_query

    def mine(self, keys: Sequence[QueryKey], seed: int = 0) -> list[QueryResult]:
        """Negatives for each query of `keys` (each key must be a query of the pool)."""
        if not keys:
            return []
        queries = [view.query_vectors(keys) for view in self.dense]
        unions_d, bm25_scores = self._retrieve(keys, queries)
        unions = [list(u) for u in unions_d]
        per_query = self._teacher_scores(keys, queries, unions, bm25_scores)
        sel_config = self.config.selection
        results = []
        for key, ids, teacher_scores in zip(keys, unions, per_query, strict=True):
            fused = fuse(ids, teacher_scores, self.config.fusion, self.config.rrf_k)
            positives = self.pool.positives[key]
            order = np.lexsort((np.asarray(ids), -fused))[: sel_config.candidate_k + len(positives) + 1]
            ranked = [ids[j] for j in order]
            scores = {d: float(s) for d, s in zip(ids, fused, strict=True)}
            rng = np.random.default_rng([seed, *key_digest(key)])
            selection = select_negatives(
                [self.pool.corpus[d] for d in ranked],
                [scores[d] for d in ranked],
                [scores[p] for p in positives],
                query=key[1],
                positives=[self.pool.corpus[p] for p in positives],
                config=sel_config,
                rng=rng,
            )
            labels = None
            if self.label_position is not None:
                labels = {d: float(s) for d, s in zip(ids, teacher_scores[self.label_position], strict=True)}
            results.append(QueryResult(selection, [ranked[j] for j in selection.kept], scores, labels))
        return results


def key_digest(key: QueryKey) -> list[int]:
    """A stable seed component per query, so random sampling does not depend on chunking or order."""
    digest = hashlib.blake2b("\x1f".join(key).encode(), digest_size=8).digest()
    return [int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")]
