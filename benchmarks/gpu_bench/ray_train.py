"""The production profile's own train stage at the real size: `embedforge train configs/nv-embed-v2.yaml` through Ray
Train on one GPU, with overrides for one worker, a handful of steps of the production per-GPU batch (4 queries,
7 hard negatives each; NV-Embed 4.2's 128 over 32 GPUs) on a shared dataset that travels (banking77), and the
random-weight backbone folder; the run's manifest records device, dtype, peak GPU memory and tokens/s."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from embedforge.paths import REPO_ROOT

STEPS = 6
SOURCE = (
    "[{name: banking77, kind: shared, path: banking77, split: train, task_type: classification, max_examples: 256,"
    ' instruction: "Given a online banking query find the corresponding intents"}]'
)


def overrides(folder: Path, gpu: bool, steps: int, latents: int | None) -> list[str]:
    gpus = "1" if gpu else "0"
    stage = (
        f"[{{name: retrieval, datasets: [{{source: banking77}}], steps: {steps}, global_batch_size: 4, "
        "num_negatives: 7, learning_rate: 2.0e-5, warmup_steps: 1}]"
    )
    values = [
        f"model.backbone={folder}",
        f"data.sources={SOURCE}",
        "synth.enabled=false",
        f"train.stages={stage}",
        "train.num_workers=1",
        f"train.use_gpu={str(gpu).lower()}",
        f"train.checkpoint_every={steps}",
        "train.log_every=1",
        f"serve.num_gpus={gpus}",
        f"serve.num_cpus={min(4, os.cpu_count() or 1)}",
        f"resources.num_gpus={gpus}",
        f"resources.num_cpus={os.cpu_count()}",
    ]
    if latents:
        values.append(f"model.latent_attention.num_latents={latents}")
    return values


def ray_train_phase(settings: dict[str, Any], folder: Path) -> dict[str, Any]:
    run_dir = Path(settings["models_dir"]) / "train-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "embedforge.cli.main", "train", str(REPO_ROOT / "configs" / "nv-embed-v2.yaml")]
    cmd += ["--run-dir", str(run_dir)]
    for value in overrides(folder, settings["device"] == "cuda", STEPS, settings.get("latents")):
        cmd += ["--set", value]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "platform"), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    subprocess.run(cmd, check=True, env=env)
    manifest = json.loads((run_dir / "train" / "manifest.json").read_text())
    return {
        "command": "embedforge train configs/nv-embed-v2.yaml " + " ".join(f"--set '{v}'" for v in cmd[6::2]),
        "seconds": round(time.perf_counter() - started, 1),
        "status": manifest["status"],
        "usage": manifest["usage"],
        "throughput": manifest["throughput"],
        "timings": manifest["timings"],
        "counts": manifest["counts"],
        "batch": manifest["batch"],
    }
