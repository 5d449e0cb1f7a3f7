"""Quality check of the training stage: train with a config, then evaluate the trained model against the untrained
mean-pooled base on STS Benchmark dev (Spearman) and the TREC DL MS MARCO subset (nDCG@10) with
`embedforge.evaluate`. Writes benchmarks/results/train_quality.json (scores, deltas, training time, settings).

    .venv/bin/python benchmarks/train_quality.py configs/local.yaml --run-dir runs/quality [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import ray
    import torch
    from common import machine_info, write_result

    from embedforge.config import load_config
    from embedforge.evaluate.run import run_evaluate
    from embedforge.train.run import run_train

    torch.set_num_threads(2)
    machine = machine_info()
    # a private cluster: never join a development head another process left running on this machine
    ray.init(address="local", num_cpus=2, object_store_memory=1024**3, include_dashboard=False)
    config = load_config(args.config, args.overrides)
    started = time.time()
    manifest = run_train(config, args.run_dir)
    train_s = time.time() - started
    limits = {"stsb": args.stsb_pairs, "trec_dl_msmarco_subset": args.retrieval_queries}
    scores, metrics, evaluated = {}, {}, {}
    for task in TASKS:  # one evaluation per task: each gets its own size limit
        eval_config = load_config(args.config, [
            *args.overrides, f"evaluate.tasks=[{task}]", f"evaluate.baselines=[{BASE}]",
            f"evaluate.max_examples_per_task={limits[task]}", f"evaluate.baseline_for_deltas={BASE}",
            f"evaluate.max_corpus_documents={json.dumps(args.corpus)}",
        ])
        run_evaluate(eval_config, args.run_dir, models=["trained", BASE])
        report = json.loads((Path(args.run_dir) / "evaluate" / "report.json").read_text())
        scores[task], metrics[task] = report["tasks"][task]["scores"], report["tasks"][task]["main_metric"]
        evaluated[task] = eval_config.evaluate.model_dump(mode="json")
    deltas = {t: scores[t]["trained"] - scores[t][BASE] for t in TASKS}
    path = write_result("train_quality", {
        "machine": machine,
        "config": args.config,
        "overrides": args.overrides,
        "evaluate": evaluated,
        "train_seconds_fit": manifest.get("timings", {}).get("fit"),
        "train_seconds_stage_total": round(train_s, 1),
        "steps": manifest.get("counts", {}).get("steps"),
        "scores": scores,
        "main_metrics": metrics,
        "ratios": {f"{t}_delta": round(d, 4) for t, d in deltas.items()},
        "goals": {"stsb_delta": ">= 0.15 Spearman over the untrained mean-pooled base",
                  "trec_dl_msmarco_subset_delta": "> 0 nDCG@10 over the base"},
    })
    print(path.read_text())


if __name__ == "__main__":
    main()
