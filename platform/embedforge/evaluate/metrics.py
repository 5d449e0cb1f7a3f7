"""The MTEB main scores and their companions (NV-Embed 5; MTEB, Muennighoff et al. 2023, section 3.2).

Ranking metrics follow trec_eval / pytrec_eval, as MTEB does: nDCG uses the linear gain `rel / log2(rank + 1)`
with the ideal ranking built from every judged document, recall counts documents with relevance > 0, and a
query without any relevant document scores 0. Scores are fractions in [0, 1] (reports show them x100).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import spearmanr
from sklearn.cluster import KMeans
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


def rank_documents(scores: np.ndarray, doc_ids: Sequence[str], top_k: int) -> list[list[str]]:
    """Per query (rows of `scores`), the ids of the top_k documents by descending score.

    Ties break by descending doc id, as pytrec_eval does, so results do not depend on corpus order."""
    ids = np.asarray(doc_ids)
    id_rank = np.empty(len(ids), dtype=np.int64)
    id_rank[np.argsort(ids, kind="stable")] = np.arange(len(ids))
    top_k = min(top_k, scores.shape[1])
    out = []
    for row in scores:
        kth = np.partition(-row, top_k - 1)[top_k - 1]
        candidates = np.nonzero(-row <= kth)[0]  # the top_k plus everything tied with the last of them
        order = candidates[np.lexsort((-id_rank[candidates], -row[candidates]))][:top_k]
        out.append([str(ids[j]) for j in order])
    return out


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
    """Accuracy on the test split of a logistic regression fit on the train split's embeddings (MTEB 3.2)."""
    clf = LogisticRegression(max_iter=1000, random_state=seed)
    clf.fit(train_x, list(train_y))
    return float(np.mean(clf.predict(test_x) == np.asarray(test_y)))


def kmeans_v_measure(x: np.ndarray, labels: Sequence[str], seed: int = 0) -> float:
    """V-measure of k-means (k = number of gold labels) against the gold labels (clustering main score)."""
    k = len(set(labels))
    if k < 2:
        raise ValueError("clustering needs at least 2 distinct labels")
    predicted = KMeans(n_clusters=k, n_init=10, random_state=seed).fit_predict(x)
    return float(v_measure_score(list(labels), predicted))
