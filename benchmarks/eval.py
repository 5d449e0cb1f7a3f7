"""Evaluation: embedforge's own scorer against the `mteb` package on the same local data, in one run.

all-MiniLM-L6-v2 on three tasks built from the shared data (STS: stsb, pair classification: mrpc, retrieval:
trec_dl_msmarco_subset). For each system: wall time and main scores. Also embedforge with a warm embedding cache
(the second evaluation of the same model, as in a re-run or when mining already embedded the texts).
Goals: scores equal mteb's within 1e-4; embedforge at least as fast as mteb (>= 1.0x); warm cache >= 3x faster
than cold. Rounds alternate between systems and the best round counts, so a busy machine slows all alike.

    .venv/bin/python benchmarks/eval.py [--pairs 400] [--queries 10] [--corpus 1000] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_result

from embedforge.config.evaluate import EvaluateConfig
from embedforge.evaluate.cached import CachedEncoder
from embedforge.evaluate.models import load_model
from embedforge.evaluate.mteb_adapter import MTEB_MAIN_SCORE, MtebEncoder, to_mteb_task
from embedforge.evaluate.registry import build_task
from embedforge.evaluate.scoring import score_task
from embedforge.models.bundled import prepare

log = logging.getLogger("bench.eval")
MODEL = "bundled:all-minilm-l6-v2"


def _ours(tasks, encoder) -> tuple[float, dict[str, float]]:
    start = time.perf_counter()
    scores = {t.name: score_task(t, encoder)["main_score"] for t in tasks}
    return time.perf_counter() - start, scores


def _mteb(tasks, encoder) -> tuple[float, dict[str, float]]:
    import mteb

    start = time.perf_counter()
    adapter = MtebEncoder(encoder, {t.name: t.instruction for t in tasks})
    result = mteb.evaluate(adapter, [to_mteb_task(t) for t in tasks], cache=None, show_progress_bar=False)
    elapsed = time.perf_counter() - start
    by_name = {t.name: t for t in tasks}
    return elapsed, {
        r.task_name: r.scores["test"][0][MTEB_MAIN_SCORE[by_name[r.task_name].family]] for r in result.task_results
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--queries", type=int, default=10)
    parser.add_argument("--corpus", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    torch.set_num_threads(args.threads)
    prepare(["all-minilm-l6-v2"])
    config = EvaluateConfig()
    tasks = [
        build_task("stsb", config).limit(args.pairs),
        build_task("mrpc", config).limit(args.pairs),
        build_task("trec_dl_msmarco_subset", config).limit(args.queries).limit_corpus(args.corpus),
    ]
    texts = sum(2 * len(t.pairs) for t in tasks[:2]) + len(tasks[2].queries) + len(tasks[2].corpus)
    encoder = load_model(MODEL)
    times: dict[str, list[float]] = {"embedforge": [], "mteb": [], "embedforge_warm_cache": []}
    scores: dict[str, dict[str, float]] = {}
    for r in range(args.rounds):
        elapsed, scores["embedforge"] = _ours(tasks, encoder)
        times["embedforge"].append(elapsed)
        elapsed, scores["mteb"] = _mteb(tasks, encoder)
        times["mteb"].append(elapsed)
        with tempfile.TemporaryDirectory() as cache:
            _ours(tasks, CachedEncoder(encoder, MODEL, cache))  # fills the cache
            elapsed, scores["embedforge_warm_cache"] = _ours(tasks, CachedEncoder(encoder, MODEL, cache))
        times["embedforge_warm_cache"].append(elapsed)
        log.info("round %d: %s", r + 1, {k: round(v[-1], 2) for k, v in times.items()})
    best = {k: min(v) for k, v in times.items()}
    max_diff = max(abs(scores["embedforge"][t] - scores["mteb"][t]) for t in scores["mteb"])
    payload = {
        "model": MODEL,
        "tasks": {t.name: {"family": t.family, "size": t.size()} for t in tasks},
        "texts_per_evaluation": texts,
        "seconds_best_round": best,
        "seconds_all_rounds": times,
        "texts_per_second": {k: texts / v for k, v in best.items()},
        "main_scores": scores,
        "max_abs_score_difference_vs_mteb": max_diff,
        "ratios": {
            "embedforge_speedup_vs_mteb": best["mteb"] / best["embedforge"],
            "warm_cache_speedup_vs_cold": best["embedforge"] / best["embedforge_warm_cache"],
            "max_abs_score_difference_vs_mteb": max_diff,
        },
        "goals": {
            "embedforge_speedup_vs_mteb": ">= 1.0",
            "warm_cache_speedup_vs_cold": ">= 3.0",
            "max_abs_score_difference_vs_mteb": "<= 1e-4",
        },
        "command": "benchmarks/eval.py " + " ".join(sys.argv[1:]),
        "machine": machine_info(),
    }
    path = write_result("eval", payload)
    log.info("wrote %s: ratios %s", path, payload["ratios"])


if __name__ == "__main__":
    main()
