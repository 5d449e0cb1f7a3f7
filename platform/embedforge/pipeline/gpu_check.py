"""`make gpu-check` (`python -m embedforge.pipeline.gpu_check`): every stage of configs/tiny.yaml on the GPU.

On a machine with an NVIDIA GPU it runs the whole pipeline (synth on vLLM, mine with a causal last-token bf16
teacher, bf16 LoRA training, evaluation, export, a Ray Serve deployment) with every stage reserving GPUs, then
fails unless every stage's manifest says it ran on `cuda` with non-zero peak GPU memory, the served replica's
`/ready` says the same, and the served embedding equals the offline one (cosine >= 0.999). Anywhere else it
prints "no GPU: skipped" and exits 0. `--skip synth` leaves out the vLLM stage (for a machine where vLLM cannot be
installed); the report says which stages ran.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from embedforge.logs import configure_logging
from embedforge.paths import REPO_ROOT

TINY = REPO_ROOT / "configs" / "tiny.yaml"
MIN_COSINE = 0.999
GPU_STAGES = ("synth", "mine", "train", "evaluate")
CHECK_TEXTS = ["GPUs run every stage of the pipeline.", "A served embedding equals the offline one.", "short"]
# every stage reserves a share of one GPU (stages run one after another; a share lets them fit one card)
GPU_OVERRIDES = (
    "resources.num_gpus=1",
    "synth.generator.num_gpus_per_engine=0.5",
    # a decoder teacher with its own causal, last-token, half-precision settings (e5-mistral's shape), plus BM25
    "mine.teachers=[{kind: embedforge, model: bundled:tiny-llama, num_gpus: 0.25, batch_size: 32,"
    " model_settings: {pooling: last, bidirectional: false, dtype: bfloat16}}, {kind: bm25}]",
    "train.use_gpu=true",  # mixed_precision auto: bf16 autocast on a GPU that has it
    "evaluate.gpus_per_worker=0.25",
    "serve.num_gpus=0.25",
    "serve.port=0",
)


def has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def stage_problems(run_dir: Path, stages: list[str]) -> list[str]:
    """What keeps `stages` of the run at `run_dir` from having run on the GPU (empty when all did)."""
    from embedforge.runs.stage import read_manifest

    problems = []
    for stage in stages:
        manifest = read_manifest(run_dir / stage)
        if manifest is None or manifest.get("status") != "complete":
            problems.append(f"{stage}: no complete manifest at {run_dir / stage}")
            continue
        problems += usage_problems(stage, manifest.get("usage") or {})
    return problems


def usage_problems(where: str, usage: dict[str, Any]) -> list[str]:
    """Why a usage record (`cluster.device.usage` or `stage_usage`) is not a GPU run, if it is not."""
    problems = []
    if usage.get("device") != "cuda":
        problems.append(f"{where}: ran on {usage.get('device')!r}, not cuda")
    if not float(usage.get("peak_accelerator_memory_mb") or 0) > 0:
        problems.append(f"{where}: peak GPU memory {usage.get('peak_accelerator_memory_mb')!r} MiB, expected > 0")
    return problems


def served_problems(endpoint: str, config: Any, model: str) -> tuple[list[str], dict[str, Any]]:
    """Check the deployment: `/ready` reports cuda and GPU memory, and its embeddings equal the offline model's."""
    import numpy as np

    from embedforge.model import load_encoder
    from embedforge.pipeline.probe import base_url, embed

    served = np.asarray(embed(endpoint, config, CHECK_TEXTS), dtype=np.float32)
    with urllib.request.urlopen(f"{base_url(endpoint)}/ready", timeout=60) as resp:
        ready = json.loads(resp.read())
    offline = load_encoder(model, device="cuda" if has_gpu() else "cpu").encode_documents(CHECK_TEXTS)
    cosines = [float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(served, offline, strict=True)]
    problems = usage_problems("serve /ready", ready.get("usage") or {})
    if min(cosines) < MIN_COSINE:
        problems.append(f"serve: served vs offline cosine {min(cosines):.6f} < {MIN_COSINE}")
    return problems, {"ready": ready, "cosines": cosines}


def run_check(run_dir: Path, skip: list[str]) -> dict[str, Any]:
    """Run the tiny pipeline on the GPU into `run_dir` and check it; returns the report (`ok` says the verdict)."""
    from embedforge.config import load_config
    from embedforge.models.bundled import prepare
    from embedforge.pipeline.demo import bundled_models
    from embedforge.pipeline.runner import run_pipeline

    # a private embedding cache: vectors cached by an earlier CPU run would leave the mining workers nothing to do
    cache = [f"mine.cache_dir={run_dir / 'embeddings'}", f"evaluate.cache_dir={run_dir / 'embeddings'}"]
    config = load_config(str(TINY), [*GPU_OVERRIDES, *cache])
    if "synth" in skip:  # without synthesis nothing trains on synthetic data
        sources = [s for s in config.data.sources if s.kind != "run"]
        config = config.model_copy(
            update={
                "synth": config.synth.model_copy(update={"enabled": False}),
                "data": config.data.model_copy(update={"sources": sources}),
            }
        )
    prepare(bundled_models(config))
    record = run_pipeline(config, run_dir, config_source=str(TINY))
    stages = [s for s in GPU_STAGES if s not in skip]
    problems = stage_problems(run_dir, stages)
    deploy = record["steps"]["deploy"]
    served, details = served_problems(deploy["endpoint"], config, deploy["model"])
    report = {
        "ok": not (problems + served),
        "problems": problems + served,
        "stages": {s: (json.loads((run_dir / s / "manifest.json").read_text()).get("usage")) for s in stages},
        "skipped": skip,
        **details,
    }
    (run_dir / "gpu_check.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", type=Path, default=REPO_ROOT / "runs" / "gpu-check")
    parser.add_argument("--skip", nargs="*", default=[], choices=["synth"], help="stages to leave out")
    args = parser.parse_args(argv)
    if not has_gpu():
        print("no GPU: skipped (make gpu-check runs every stage on an NVIDIA GPU; none is visible here)")
        return 0
    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    report = run_check(args.run_dir, args.skip)
    print("\nstage      device  GPUs  dtype       peak GPU MiB")
    for stage, usage in {**report["stages"], "serve": report["ready"].get("usage")}.items():
        usage = usage or {}
        print(
            f"{stage:<10} {usage.get('device')!s:<7} {usage.get('device_count')!s:<5} {usage.get('dtype')!s:<11} "
            f"{usage.get('peak_accelerator_memory_mb')}"
        )
    print(f"served vs offline cosine: min {min(report['cosines']):.6f} over {len(report['cosines'])} texts")
    if report["skipped"]:
        print(f"left out: {', '.join(report['skipped'])}")
    if not report["ok"]:
        for problem in report["problems"]:
            print(f"error: {problem}")
        return 1
    print(f"gpu-check passed: every stage ran on the GPU (report at {args.run_dir / 'gpu_check.json'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
