"""Quality check of the training stage: train with a config, then evaluate the trained model against the untrained
mean-pooled base on STS Benchmark dev (Spearman) and the TREC DL MS MARCO subset (nDCG@10) with the tasks and
scorers of `embedforge.evaluate`, in this process (no Ray: scoring two models is small).
Writes benchmarks/results/train_quality.json (scores, deltas, training time, settings).

    .venv/bin/python benchmarks/train_quality.py configs/local.yaml --run-dir runs/quality [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

BASE = "bundled:smollm2-135m-instruct"
TASKS = ("stsb", "trec_dl_msmarco_subset")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("config")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--stsb-pairs", type=int, default=1500, help="STS-B dev pairs scored (1500 = all)")
    parser.add_argument("--retrieval-queries", type=int, default=50, help="TREC DL queries kept (50 = all)")
    parser.add_argument("--corpus", type=int, default=None, help="retrieval corpus cap (judged documents stay)")
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import machine_info, write_result

    from embedforge.cluster.local import start_private_cluster
    from embedforge.config import load_config
    from embedforge.evaluate.registry import build_task
    from embedforge.evaluate.scoring import score_task
    from embedforge.evaluate.tasks import RetrievalTask
    from embedforge.model import load_encoder
    from embedforge.runs.stage import read_manifest
    from embedforge.train.run import run_train, stage_settings

    torch.set_num_threads(2)
    machine = machine_info()
    config = load_config(args.config, args.overrides)
    previous = read_manifest(Path(args.run_dir) / "train")
    if previous is None or previous.get("config_hash") != stage_settings(config)[1] or previous["status"] != "complete":
        # a private cluster: never join a development head another process left running on this machine
        start_private_cluster(2, 1024**3)
    started = time.time()
    manifest = run_train(config, args.run_dir)
    train_s = time.time() - started
    limits = {"stsb": args.stsb_pairs, "trec_dl_msmarco_subset": args.retrieval_queries}
    models = {"trained": str(Path(args.run_dir) / "train" / "model"), BASE: BASE}
    scores: dict[str, dict[str, float]] = {t: {} for t in TASKS}
    metrics = {}
    for name, ref in models.items():  # in-process scoring: the evaluation stage's own tasks and scorers
        encoder = load_encoder(ref, model_config=config.model)
        for task_name in TASKS:
            task = build_task(task_name, config.evaluate).limit(limits[task_name], seed=0)
            if isinstance(task, RetrievalTask):
                task = task.limit_corpus(args.corpus, seed=0)
            result = score_task(task, encoder, batch_size=16)
            scores[task_name][name], metrics[task_name] = result["main_score"], task.main_metric
            logging.info("%s on %s: %s = %.4f", name, task_name, task.main_metric, result["main_score"])
    deltas = {t: scores[t]["trained"] - scores[t][BASE] for t in TASKS}
    path = write_result(
        "train_quality",
        {
            "machine": machine,
            "config": args.config,
            "overrides": args.overrides,
            "evaluate": {"limits": limits, "corpus": args.corpus, "seed": 0},
            "train_seconds_fit": manifest.get("timings", {}).get("fit"),
            "train_seconds_stage_total": round(train_s, 1),
            "steps": manifest.get("counts", {}).get("steps"),
            "scores": scores,
            "main_metrics": metrics,
            "ratios": {f"{t}_delta": round(d, 4) for t, d in deltas.items()},
            "goals": {
                "stsb_delta": ">= 0.15 Spearman over the untrained mean-pooled base",
                "trec_dl_msmarco_subset_delta": "> 0 nDCG@10 over the base",
            },
        },
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
