"""Score one task with one encoder: embed what the family needs, then compute its metrics (MTEB section 3.2).

Who gets the instruction follows NV-Embed section 4 / Table 13: retrieval and reranking queries get it and
documents stay bare; in the symmetric families (STS, pair classification, classification, clustering) every
text gets it, so all of them go through `encode_queries(texts, task=instruction)`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from embedforge.evaluate import metrics
from embedforge.evaluate.tasks import (
    ClassificationTask,
    ClusteringTask,
    PairClassificationTask,
    RerankingTask,
    RetrievalTask,
    STSTask,
    Task,
)
from embedforge.model.protocol import TextEncoder

RECALL_KS = (1, 5, 10, 100)
RETRIEVAL_TOP_K = 1000
CORPUS_BLOCK = 32768  # retrieval documents encoded and scored at once: memory bounded by this, not by the corpus


def score_task(task: Task, encoder: TextEncoder, batch_size: int = 32, seed: int = 0) -> dict[str, Any]:
    """All metrics of `task` for `encoder`; `main_score` is the family's main metric."""
    scorer = {
        RetrievalTask: _retrieval,
        RerankingTask: _reranking,
        STSTask: _sts,
        PairClassificationTask: _pair_classification,
        ClassificationTask: _classification,
        ClusteringTask: _clustering,
    }.get(type(task))
    if scorer is None:
        raise TypeError(f"no scorer for task type {type(task).__name__}")
    scores = scorer(task, encoder, batch_size, seed)
    scores["main_score"] = scores[task.main_metric]
    return scores


def retrieval_rankings(task: RetrievalTask, encoder: TextEncoder, batch_size: int) -> list[list[str]]:
    """Each query's top RETRIEVAL_TOP_K document ids, best first, the corpus encoded and searched in blocks."""
    q = _queries(encoder, [x.text for x in task.queries], task, batch_size)
    ranked = metrics.RunningTopK([x.doc_id for x in task.corpus], len(q), RETRIEVAL_TOP_K)
    for start in range(0, len(task.corpus), CORPUS_BLOCK):
        block = task.corpus[start : start + CORPUS_BLOCK]
        ranked.add(q @ encoder.encode_documents([x.embedded_text for x in block], batch_size=batch_size).T, start)
    return ranked.rankings()


def _retrieval(task: RetrievalTask, encoder: TextEncoder, batch_size: int, seed: int) -> dict[str, Any]:
    rankings = retrieval_rankings(task, encoder, batch_size)
    judged = [task.qrels[x.query_id] for x in task.queries]
    out = {"ndcg_at_10": _mean(metrics.ndcg_at_k(r, j, 10) for r, j in zip(rankings, judged, strict=True))}
    for k in RECALL_KS:
        out[f"recall_at_{k}"] = _mean(metrics.recall_at_k(r, j, k) for r, j in zip(rankings, judged, strict=True))
    out["mrr_at_10"] = _mean(metrics.reciprocal_rank(r, j, 10) for r, j in zip(rankings, judged, strict=True))
    out["map"] = _mean(metrics.average_precision(r, j) for r, j in zip(rankings, judged, strict=True))
    out["num_queries"], out["num_documents"] = len(task.queries), len(task.corpus)
    return out


def _reranking(task: RerankingTask, encoder: TextEncoder, batch_size: int, seed: int) -> dict[str, Any]:
    q = _queries(encoder, [g.query for g in task.groups], task, batch_size)
    candidates = [[*g.positives, *g.negatives] for g in task.groups]
    flat = [c for group in candidates for c in group]
    d = encoder.encode_documents(flat, batch_size=batch_size)
    aps, rrs, start = [], [], 0
    for i, (g, cands) in enumerate(zip(task.groups, candidates, strict=True)):
        block = d[start : start + len(cands)]
        start += len(cands)
        ids = [str(j) for j in range(len(cands))]
        judged = {str(j): 1.0 for j in range(len(g.positives))}
        ranking = metrics.rank_documents((block @ q[i])[None, :], ids, len(ids))[0]
        aps.append(metrics.average_precision(ranking, judged))
        rrs.append(metrics.reciprocal_rank(ranking, judged, 10))
    return {"map": _mean(aps), "mrr_at_10": _mean(rrs), "num_queries": len(task.groups), "num_candidates": len(flat)}


def pair_cosines(task: STSTask | PairClassificationTask, encoder: TextEncoder, batch_size: int) -> np.ndarray:
    """The cosine of each of the task's pairs, both sides embedded as queries (with the task's instruction), as STS
    and pair classification score them."""
    a = _queries(encoder, [p.text1 for p in task.pairs], task, batch_size)
    b = _queries(encoder, [p.text2 for p in task.pairs], task, batch_size)
    return metrics.cosine_pairs(a, b)


def _sts(task: STSTask, encoder: TextEncoder, batch_size: int, seed: int) -> dict[str, Any]:
    cos = pair_cosines(task, encoder, batch_size)
    gold = [p.score for p in task.pairs]
    return {"cosine_spearman": metrics.spearman(gold, cos), "num_pairs": len(task.pairs)}


def _pair_classification(
    task: PairClassificationTask, encoder: TextEncoder, batch_size: int, seed: int
) -> dict[str, Any]:
    cos = pair_cosines(task, encoder, batch_size)
    labels = [int(p.score) for p in task.pairs]
    return {"cosine_ap": metrics.pair_average_precision(labels, cos), "num_pairs": len(task.pairs)}


def _classification(task: ClassificationTask, encoder: TextEncoder, batch_size: int, seed: int) -> dict[str, Any]:
    """MTEB's protocol (`ClassificationTask`): one classifier per label-balanced draw, accuracies averaged; the
    texts of every draw are encoded once."""
    draws = task.training_draws(seed)
    used = sorted({i for draw in draws for i in draw})
    row = {i: k for k, i in enumerate(used)}
    train = _queries(encoder, [task.train[i].text for i in used], task, batch_size)
    test = _queries(encoder, [x.text for x in task.test], task, batch_size)
    test_labels = [x.label for x in task.test]
    accuracies = [
        metrics.logistic_regression_accuracy(
            train[[row[i] for i in draw]], [task.train[i].label for i in draw], test, test_labels, seed=seed
        )
        for draw in draws
    ]
    return {
        "accuracy": _mean(accuracies),
        "accuracy_std": float(np.std(accuracies)),
        "experiments": len(draws),
        "samples_per_label": task.samples_per_label,
        "num_train": len(used),
        "num_test": len(task.test),
    }


def _clustering(task: ClusteringTask, encoder: TextEncoder, batch_size: int, seed: int) -> dict[str, Any]:
    x = _queries(encoder, [t.text for t in task.texts], task, batch_size)
    return {
        "v_measure": metrics.kmeans_v_measure(x, [t.label for t in task.texts], seed=seed),
        "num_texts": len(task.texts),
    }


def _queries(encoder: TextEncoder, texts: list[str], task: Task, batch_size: int) -> np.ndarray:
    """Every query-side text of a task: its instruction, after its in-context demonstrations (LGAI 4.2)."""
    return encoder.encode_queries(texts, task=task.instruction, batch_size=batch_size, examples=task.demonstrations)


def _mean(values: Any) -> float:
    values = list(values)
    return float(np.mean(values)) if values else 0.0
