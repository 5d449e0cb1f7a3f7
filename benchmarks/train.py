"""Training throughput and memory: Ray Train against a plain PyTorch loop, 2 workers against 1, GradCache memory.

All runs use the same model, config, batch plan and step code (`embedforge.train.worker.StepRunner`):
1. tokens/s of a plain in-process PyTorch loop vs `TorchTrainer` with 1 worker (goal: Ray overhead <= 10 %),
   measured over wall time between steps 2..N (start-up excluded, reporting and checkpoint waits included, at
   the default `train.log_every`);
2. tokens/s with 2 workers (DDP gloo, each its own batch) vs 1 (goal: scaling efficiency >= 0.8);
3. peak memory growth during one step with GradCache at 8x the batch vs the plain loss at 1x (goal <= 1.3x), each
   in a child process sampling its own RSS.
Each worker and the plain loop get 1 torch thread. Writes benchmarks/results/train.json.

    .venv/bin/python benchmarks/train.py [--model bundled:tiny-llama] [--steps 8] [--batch 32]
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


def _config(model: str, steps: int, batch: int, workers: int, gradcache_chunk: int | None = None):
    from embedforge.config import load_config

    overrides = [
        f"model.backbone={model}",
        "model.max_query_length=32",
        "model.max_doc_length=64",
        "data.sources.0.max_examples=1000",
        f"train.num_workers={workers}",
        "train.cpus_per_worker=1",
        f"train.checkpoint_every={steps}",
        f"train.stages=[{{name: s1, datasets: [{{source: wikiqa}}], steps: {steps}, batch_size: {batch}, "
        "num_negatives: 3, learning_rate: 1.0e-4, warmup_steps: 0}]",
    ]
    if gradcache_chunk:
        overrides += ["train.gradcache.enabled=true", f"train.gradcache.chunk_size={gradcache_chunk}"]
    return load_config(REPO / "configs" / "tiny.yaml", overrides)


def _examples(config):
    from embedforge.train.examples import load_training_examples

    return load_training_examples(config, Path(tempfile.mkdtemp())).examples


def _runner(config):
    import torch

    from embedforge.train.batching import StagePlan
    from embedforge.train.inputs import Encoder
    from embedforge.train.schedule import make_optimizer
    from embedforge.train.trainable import build_trainable
    from embedforge.train.worker import StepRunner, read_examples

    class Rows:
        def __init__(self, rows):
            self.rows = rows

        def iter_rows(self):
            return iter(self.rows)

    torch.manual_seed(config.train.seed)
    examples = read_examples(Rows([e.to_row() for v in _examples(config).values() for e in v]))
    stage = config.train.stages[0]
    plan = StagePlan(examples, stage, 1, config.train.seed)
    embedder = build_trainable(config)
    embedder.train()
    runner = StepRunner(Encoder(embedder), embedder, config.train, bf16=False, teacher=None)
    return runner, plan, stage, make_optimizer(embedder.parameters(), stage.learning_rate, 0.0)


def plain_loop(config) -> dict:
    """Tokens/s of the same steps without Ray: build, then time steps 2..N."""
    import torch

    torch.set_num_threads(1)
    runner, plan, stage, optimizer = _runner(config)
    times, tokens = [], []
    for step in range(stage.steps):
        metrics = runner(plan.batch(step, 0), stage, optimizer)
        times.append(time.perf_counter())
        tokens.append(metrics["tokens"])
    return {"tokens_per_s": sum(tokens[1:]) / (times[-1] - times[0]), "steps": stage.steps}


def ray_train(config) -> dict:
    from embedforge.train.layout import METRICS_CSV
    from embedforge.train.metrics import read_rows
    from embedforge.train.run import make_trainer

    out = Path(tempfile.mkdtemp(prefix="bench-train-"))
    started = time.perf_counter()
    make_trainer(config, out, f"bench{config.train.num_workers}", _examples(config)).fit()
    rows = read_rows(out / METRICS_CSV)
    tokens = [float(r["tokens_per_s"]) * float(r["step_s"]) for r in rows]
    span = float(rows[-1]["time"]) - float(rows[0]["time"])
    compute = sum(float(r["step_s"]) for r in rows[1:])
    return {
        "tokens_per_s": sum(tokens[1:]) / span,
        "compute_tokens_per_s": sum(tokens[1:]) / compute,
        "steps": len(rows),
        "wall_s_with_startup": time.perf_counter() - started,
    }


def memory_child(args) -> None:
    """One step in this process; prints the peak RSS growth over the RSS before the step (bytes)."""
    import psutil
    import torch

    torch.set_num_threads(1)
    config = _config(args.model, 1, args.child_batch, 1, args.child_chunk)
    runner, plan, stage, optimizer = _runner(config)
    batch = plan.batch(0, 0)
    proc = psutil.Process()
    base, peak, done = proc.memory_info().rss, [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    runner(batch, stage, optimizer)
    done.set()
    thread.join()
    print(json.dumps({"base_rss": base, "peak_growth": max(peak[0] - base, 0), "batch": args.child_batch}))


def _memory(model: str, batch: int, chunk: int | None) -> dict:
    cmd = [sys.executable, __file__, "--model", model, "--child-batch", str(batch)]
    if chunk:
        cmd += ["--child-chunk", str(chunk)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "MALLOC_ARENA_MAX": "2"})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="bundled:tiny-llama")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--child-batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--child-chunk", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_batch:
        memory_child(args)
        return
    import ray
    from common import machine_info, write_result

    from embedforge.cluster.local import start_private_cluster

    machine = machine_info()
    start_private_cluster(2, 512 * 1024**2, log_to_driver=False)
    plain = plain_loop(_config(args.model, args.steps, args.batch, 1))
    one = ray_train(_config(args.model, args.steps, args.batch, 1))
    two = ray_train(_config(args.model, args.steps, args.batch, 2))
    ray.shutdown()
    small = max(args.batch // 4, 2)
    mem_plain = _memory(args.model, small, None)
    mem_cached = _memory(args.model, 8 * small, small)
    overhead = 1 - one["tokens_per_s"] / plain["tokens_per_s"]
    scaling = two["tokens_per_s"] / (2 * one["tokens_per_s"])
    memory_ratio = mem_cached["peak_growth"] / max(mem_plain["peak_growth"], 1)
    path = write_result(
        "train",
        {
            "machine": machine,
            "model": args.model,
            "settings": {"steps": args.steps, "batch_per_worker": args.batch, "negatives": 3, "threads_per_worker": 1},
            "plain_pytorch": plain,
            "ray_train_1_worker": one,
            "ray_train_2_workers": two,
            "memory": {"plain_1x": mem_plain, "gradcache_8x": mem_cached, "gradcache_chunk": small},
            "ratios": {
                "ray_overhead": round(overhead, 4),
                "scaling_efficiency_2_workers": round(scaling, 4),
                "gradcache_8x_vs_plain_1x_peak_memory": round(memory_ratio, 4),
            },
            "goals": {
                "ray_overhead": "<= 0.10",
                "scaling_efficiency_2_workers": ">= 0.8",
                "gradcache_8x_vs_plain_1x_peak_memory": "<= 1.3",
            },
            "notes": "load_average_1m shows how busy the shared 2-core machine was during the run",
        },
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
