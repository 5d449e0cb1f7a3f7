"""Hard-negative mining: embedforge `run_mine` (Ray Data actor pool, faiss) against sentence-transformers'
`mine_hard_negatives`, on the same WikiQA examples and corpus, the same teacher (all-MiniLM-L6-v2) and the same
selection (TopK-PercPos 0.95 = relative_margin 0.05, top 7 of 30 candidates, sampling `top`) and the same
forward-pass size (`--forward-batch`: embedforge's `micro_batch_size` inside 64-row Ray Data batches, and
sentence-transformers' `batch_size`; 16 is the local profile's and MiniLM's fastest on this CPU).

Each system runs in its own child process (fresh embedding cache, so nothing is reused), timed around the mining
call (model load and Ray start included), while the parent samples the summed RSS of the child's process tree.
Reports input examples/s of each, the throughput ratio (goal >= 2x on this machine, using both cores), the
overlap of the negatives chosen for each (query, positive) (goal >= 95 %), and peak memory of each.
Writes benchmarks/results/mine.json and mine.png.

    .venv/bin/python benchmarks/mine.py [--max-examples 1000] [--actors 2] [--forward-batch 16]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
NEGATIVES, CANDIDATES, MARGIN = 7, 30, 0.95


def _config(max_examples: int, cache: Path, actors: int, forward_batch: int):
    """configs/local.yaml with its WikiQA source capped and the mine section set for the comparison."""
    import yaml

    from embedforge.config import config_from_dict

    data = yaml.safe_load((REPO / "configs" / "local.yaml").read_text())
    for source in data["data"]["sources"]:
        if source["name"] == "wikiqa":
            source["max_examples"] = max_examples
    teacher = {
        "kind": "sentence_transformers",
        "model": "bundled:all-minilm-l6-v2",
        "batch_size": 64,
        "micro_batch_size": forward_batch,
        "concurrency": actors,
        "num_cpus": 1,
    }
    selection = {
        "margin_type": "perc_pos",
        "margin": MARGIN,
        "num_negatives": NEGATIVES,
        "candidate_k": CANDIDATES,
        "sampling": "top",
    }
    data["mine"] = {"teachers": [teacher], "selection": selection, "sources": ["wikiqa"], "cache_dir": str(cache)}
    return config_from_dict(data, "benchmarks/mine.py")


def worker_embedforge(args: argparse.Namespace, out: Path) -> None:
    from embedforge.data.io import read_parquet
    from embedforge.data.schema import TrainingExample
    from embedforge.mine.run import run_mine

    config = _config(args.max_examples, out.parent / "cache", args.actors, args.forward_batch)
    started = time.perf_counter()
    manifest = run_mine(config, out.parent / "run")
    seconds = time.perf_counter() - started
    rows = read_parquet(out.parent / "run" / "mine" / "data", TrainingExample)
    out.write_text(
        json.dumps(
            {
                "seconds": seconds,
                "inputs": manifest["counts"]["input_examples"],
                "rows": {f"{r.query}\x1f{r.positive}": r.negatives for r in rows},
            }
        )
    )


def worker_st(args: argparse.Namespace, out: Path) -> None:
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from embedforge.data.sources import load_source
    from embedforge.mine.pools import build_pools
    from embedforge.models.bundled import resolve_model

    torch.set_num_threads(2)
    config = _config(args.max_examples, out.parent / "cache", args.actors, args.forward_batch)
    [source] = [s for s in config.data.sources if s.name == "wikiqa"]
    examples = load_source(source)
    corpus = build_pools(examples)[0].corpus  # the same corpus embedforge mines: positives + negatives
    started = time.perf_counter()
    model = SentenceTransformer(str(resolve_model("bundled:all-minilm-l6-v2")), device="cpu")
    dataset = Dataset.from_dict({"query": [e.query for e in examples], "positive": [e.positive for e in examples]})
    mined = mine_hard_negatives(
        dataset,
        model,
        corpus=corpus,
        range_max=CANDIDATES,
        relative_margin=round(1 - MARGIN, 6),
        num_negatives=NEGATIVES,
        sampling_strategy="top",
        output_format="n-tuple",
        batch_size=args.forward_batch,
        verbose=False,
    )
    seconds = time.perf_counter() - started
    rows = {}
    for row in mined:
        negatives = [row[f"negative_{i}"] for i in range(1, NEGATIVES + 1) if row.get(f"negative_{i}")]
        rows[f"{row['query']}\x1f{row['positive']}"] = negatives
    out.write_text(json.dumps({"seconds": seconds, "inputs": len(examples), "rows": rows}))


def run_child(system: str, args: argparse.Namespace, workdir: Path) -> dict:
    import psutil

    out = workdir / system / "result.json"
    out.parent.mkdir(parents=True)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        system,
        "--out",
        str(out),
        "--max-examples",
        str(args.max_examples),
        "--actors",
        str(args.actors),
        "--forward-batch",
        str(args.forward_batch),
    ]
    proc = subprocess.Popen(cmd)
    peak, stop = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        parent = psutil.Process(proc.pid)
        while not stop.is_set():
            total = 0
            try:
                for p in [parent, *parent.children(recursive=True)]:
                    total += p.memory_info().rss
            except psutil.Error:
                pass
            peak = max(peak, total)
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if proc.wait() != 0:
        raise SystemExit(f"{system} worker failed with exit code {proc.returncode}")
    stop.set()
    sampler.join()
    result = json.loads(out.read_text())
    result["peak_rss_mib"] = round(peak / 2**20, 1)
    result["examples_per_s"] = result["inputs"] / result["seconds"]
    return result


def overlap(ours: dict[str, list[str]], theirs: dict[str, list[str]]) -> tuple[float, int]:
    """Mean share of sentence-transformers' negatives that embedforge also chose, over rows both kept."""
    common = [k for k in theirs if k in ours and theirs[k]]
    if not common:
        return 0.0, 0
    shares = [len(set(ours[k]) & set(theirs[k])) / len(theirs[k]) for k in common]
    return sum(shares) / len(shares), len(common)


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    axes[0].bar(names, [results[n]["examples_per_s"] for n in names], color=["tab:blue", "tab:gray"])
    axes[0].set_ylabel("input examples / s")
    axes[1].bar(names, [results[n]["peak_rss_mib"] for n in names], color=["tab:blue", "tab:gray"])
    axes[1].set_ylabel("peak RSS (MiB, process tree)")
    fig.suptitle("Hard-negative mining, WikiQA, MiniLM teacher, TopK-PercPos 0.95, 7 negatives")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=1000)
    parser.add_argument("--actors", type=int, default=2, help="embedforge embedding actors (1 CPU each)")
    parser.add_argument("--forward-batch", type=int, default=16, help="texts per forward pass, both systems")
    parser.add_argument("--worker", choices=["embedforge", "st"])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.worker:
        (worker_embedforge if args.worker == "embedforge" else worker_st)(args, args.out)
        return
    from common import RESULTS, machine_info, write_result

    machine = machine_info()
    with tempfile.TemporaryDirectory(prefix="bench-mine-") as tmp:
        results = {
            "sentence-transformers": run_child("st", args, Path(tmp)),
            "embedforge": run_child("embedforge", args, Path(tmp)),
        }
    share, compared = overlap(results["embedforge"].pop("rows"), results["sentence-transformers"].pop("rows"))
    ours, theirs = results["embedforge"], results["sentence-transformers"]
    payload = {
        "machine": machine,
        "settings": {
            "dataset": "wikiqa train",
            "max_examples": args.max_examples,
            "teacher": "all-MiniLM-L6-v2",
            "margin": f"TopK-PercPos {MARGIN}",
            "num_negatives": NEGATIVES,
            "candidates": CANDIDATES,
            "embedforge_actors": args.actors,
            "sentence_transformers_threads": 2,
            "forward_batch": args.forward_batch,
        },
        "embedforge": ours,
        "sentence_transformers": theirs,
        "overlap_rows_compared": compared,
        "ratios": {
            "throughput_embedforge_over_st": ours["examples_per_s"] / theirs["examples_per_s"],
            "negative_overlap": share,
            "peak_memory_embedforge_over_st": ours["peak_rss_mib"] / theirs["peak_rss_mib"],
        },
        "goals": {"throughput_embedforge_over_st": ">= 2.0", "negative_overlap": ">= 0.95"},
    }
    path = write_result("mine", payload)
    plot({"embedforge": ours, "sentence-transformers": theirs}, RESULTS / "mine.png")
    print(json.dumps(payload["ratios"], indent=2), f"\nwritten {path}")


if __name__ == "__main__":
    main()
