"""The MTEB main scores and their companions (NV-Embed 5; MTEB, Muennighoff et al. 2023, section 3.2).

Ranking metrics follow trec_eval / pytrec_eval, as MTEB does: nDCG uses the linear gain `rel / log2(rank + 1)`
with the ideal ranking built from every judged document, recall counts documents with relevance > 0, and a
query without any relevant document scores 0. Scores are fractions in [0, 1] (reports show them x100).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import spearmanr
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score, v_measure_score


def ndcg_at_k(ranking: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k of one ranked list against graded judgements (linear gain, trec_eval `ndcg_cut`)."""
    dcg = sum(qrels.get(doc, 0.0) / math.log2(i + 2) for i, doc in enumerate(ranking[:k]))
    ideal = sorted((r for r in qrels.values() if r > 0), reverse=True)[:k]
    idcg = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranking: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """Share of the relevant documents (relevance > 0) found in the top k."""
    relevant = {d for d, r in qrels.items() if r > 0}
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranking[:k])) / len(relevant)


def reciprocal_rank(ranking: Sequence[str], qrels: Mapping[str, float], k: int = 10) -> float:
    """1 / rank of the first relevant document within the top k, else 0 (averaged over queries: MRR@k)."""
    for i, doc in enumerate(ranking[:k]):
        if qrels.get(doc, 0.0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def average_precision(ranking: Sequence[str], qrels: Mapping[str, float]) -> float:
    """AP of one full ranking: mean precision at the rank of each relevant document (averaged: MAP)."""
    relevant = {d for d, r in qrels.items() if r > 0}
    if not relevant:
        return 0.0
    hits, total = 0, 0.0
    for i, doc in enumerate(ranking):
        if doc in relevant:
            hits += 1
            total += hits / (i + 1)
    return total / len(relevant)


class RunningTopK:
    """The top_k documents per query over corpus blocks scored one at a time: by descending score, ties broken by
    descending doc id as pytrec_eval does, so results depend neither on corpus order nor on the blocks. Memory is
    the kept candidates plus one block of scores, not the whole query x corpus matrix (issue 24)."""

    def __init__(self, doc_ids: Sequence[str], num_queries: int, top_k: int) -> None:
        self.ids = np.asarray(doc_ids)
        self.id_rank = np.empty(len(self.ids), dtype=np.int64)
        self.id_rank[np.argsort(self.ids, kind="stable")] = np.arange(len(self.ids))
        self.top_k = min(top_k, len(self.ids))
        self.columns = [np.zeros(0, dtype=np.int64) for _ in range(num_queries)]
        self.scores = [np.zeros(0, dtype=np.float64) for _ in range(num_queries)]

    def add(self, scores: np.ndarray, start: int) -> RunningTopK:
        """Scores of the documents `start : start + scores.shape[1]` (rows = queries)."""
        block_columns = np.arange(start, start + scores.shape[1])
        for i, row in enumerate(scores):
            columns = np.concatenate([self.columns[i], block_columns])
            merged = np.concatenate([self.scores[i], row.astype(np.float64)])
            k = min(self.top_k, len(merged))
            kth = np.partition(-merged, k - 1)[k - 1]
            candidates = np.nonzero(-merged <= kth)[0]  # the top k plus everything tied with the last of them
            best = candidates[np.lexsort((-self.id_rank[columns[candidates]], -merged[candidates]))][:k]
            self.columns[i], self.scores[i] = columns[best], merged[best]
        return self

    def rankings(self) -> list[list[str]]:
        return [[str(self.ids[j]) for j in columns] for columns in self.columns]


def rank_documents(scores: np.ndarray, doc_ids: Sequence[str], top_k: int) -> list[list[str]]:
    """Per query (rows of `scores`), the ids of the top_k documents by descending score.

    Ties break by descending doc id, as pytrec_eval does, so results do not depend on corpus order."""
    return RunningTopK(doc_ids, len(scores), top_k).add(scores, 0).rankings()


def cosine_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two equally long arrays of vectors."""
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def spearman(gold: Sequence[float], predicted: Sequence[float]) -> float:
    """Spearman rank correlation (STS main score, on cosine similarities)."""
    if len(gold) < 2:
        raise ValueError(f"Spearman needs at least 2 pairs, got {len(gold)}")
    return float(spearmanr(gold, predicted).statistic)


def pair_average_precision(labels: Sequence[int], similarities: Sequence[float]) -> float:
    """Average precision of the similarity as a score for the positive class (pair-classification main score)."""
    if len(set(labels)) < 2:
        raise ValueError("pair classification needs both positive and negative pairs")
    return float(average_precision_score(labels, similarities))


def logistic_regression_accuracy(
    train_x: np.ndarray, train_y: Sequence[str], test_x: np.ndarray, test_y: Sequence[str], seed: int = 0
) -> float:
    """Accuracy on the test split of a logistic regression fit on the train split's embeddings (MTEB 3.2), with
    MTEB's solver budget (100 iterations): a classifier that has not converged by then is scored as it stands."""
    clf = LogisticRegression(max_iter=100, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(train_x, list(train_y))
    return float(np.mean(clf.predict(test_x) == np.asarray(test_y)))


def kmeans_v_measure(x: np.ndarray, labels: Sequence[str], seed: int = 0) -> float:
    """V-measure of k-means (k = number of gold labels) against the gold labels (clustering main score)."""
    k = len(set(labels))
    if k < 2:
        raise ValueError("clustering needs at least 2 distinct labels")
    predicted = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
    return float(v_measure_score(list(labels), predicted))
