"""GPU speed of the production profile at real model sizes, against the chip's limit and sentence-transformers.

On one GPU, real architectures with random weights (benchmarks/gpu_bench/shapes: Mistral-7B-v0.1, SmolLM2-1.7B,
all-MiniLM-L6-v2, multilingual-e5-small), each measured side by side with sentence-transformers in the same run:
- training: the production profile's step (configs/nv-embed-v2.yaml, `StepRunner` as every Ray Train worker runs
  it) against sentence-transformers with PEFT LoRA and CachedMultipleNegativesRankingLoss, on the production per-GPU
  batch; tokens/s, peak memory and MFU (`embedforge.model.flops`); again with `model.compile`, and one step of the
  whole production batch (128 queries x 8 texts) with GradCache on one GPU;
- encoding: `Embedder.encode` against sentence-transformers' `encode`, uniform 512-token texts and a mix of lengths;
- serving: one Ray Serve replica under a closed loop of HTTP clients against the same model's offline encode.
MFU is over the chip's dense bf16 datasheet peak and over the bf16 matrix-product rate measured in the same run.
Every phase runs in its own process under its own time limit, so one that fails or runs long costs only itself;
the result is written after each phase.

    python benchmarks/gpu.py                # a GPU machine: about 6 minutes on an H200
    python benchmarks/gpu.py --tiny         # the same code on tiny shapes on a CPU (a test runs it)

Writes benchmarks/results/gpu.json and gpu.png (also into $OUT when it is set: the GPU bundle's output folder).
On a CUDA machine without network, `make gpu-bundle` (on a machine with network) packs what it lacks into .gpu/,
orjson included (serving's response writer; a phase whose packages are missing is skipped, naming them), and
`bash .gpu/run.sh -- python3 benchmarks/gpu.py` runs it there.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import importlib.util
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, write_result

log = logging.getLogger("bench.gpu")
HERE = Path(__file__).resolve()
LOG_TAIL = 40  # lines of a failed or timed-out phase's output kept in gpu.json

FULL: dict[str, Any] = {
    "device": "cuda",
    "matmul_size": 8192,
    "max_length": 512,
    "decoder": "mistral-7b-v0.1",
    "shapes": ["mistral-7b-v0.1", "smollm2-1.7b", "multilingual-e5-small", "all-minilm-l6-v2"],
    "encode": {
        "mistral-7b-v0.1": {"uniform": 128, "mixed": 512, "mixed_low": 16, "batch": 64, "st_default_batch": 32},
        "smollm2-1.7b": {"uniform": 256, "mixed": 1024, "mixed_low": 16, "batch": 64, "st_default_batch": 32},
        **{
            shape: {"uniform": 2048, "mixed": 2048, "mixed_low": 16, "batch": 512, "st_default_batch": 32}
            | {"model_only": True}
            for shape in ("multilingual-e5-small", "all-minilm-l6-v2")
        },
    },
    "train": {"queries": 4, "warmup": 1, "steps": 3, "profile": True, "chunk_sweep": [2048, 4096, 16384]},
    "production_batch": 128,
    "serve": {"clients": [64, 256], "texts": 1024, "batch": 64, "replica_cpus": 4, "warmup_s": 4, "duration_s": 10},
}
TINY: dict[str, Any] = {
    "device": "cpu",
    "matmul_size": 256,
    "max_length": 48,
    "latents": 16,
    "decoder": "tiny-decoder",
    "shapes": ["tiny-decoder", "tiny-bert"],
    "encode": {
        "tiny-decoder": {"uniform": 16, "mixed": 32, "mixed_low": 4, "batch": 8, "st_default_batch": 4},
        "tiny-bert": {
            "uniform": 16,
            "mixed": 32,
            "mixed_low": 4,
            "batch": 8,
            "st_default_batch": 4,
            "model_only": True,
        },
    },
    "train": {"queries": 2, "warmup": 1, "steps": 1, "profile": True, "chunk_sweep": [96, 192]},
    "production_batch": 4,
    "serve": {"clients": [2, 8], "texts": 32, "batch": 8, "replica_cpus": 1, "warmup_s": 1, "duration_s": 2},
}
# (phase, seconds it may take at most, seconds it needs to be worth starting), in the order they run: what the
# issue asks first runs first, so a short budget drops the extras
PHASES = [
    ("setup", 120, 20),
    ("train", 120, 60),
    ("train_st", 100, 45),
    ("encode_decoder", 100, 45),
    ("encode_encoders", 60, 20),
    ("serve", 120, 70),
    ("production_batch", 120, 60),
    ("train_compiled", 150, 90),
    ("encode_mid", 60, 25),
    ("train_ray", 240, 120),
]

PHASE_NEEDS = {"serve": ("orjson",), "train_st": ("sentence_transformers",)}  # packages a phase imports


# ----- the phases (each runs in a process of its own) ----------------------------------------------------------


def folder_of(settings: dict[str, Any], shape: str) -> Path:
    return Path(settings["models_dir"]) / shape


def run_phase(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    sys.path.insert(0, str(HERE.parent))
    from gpu_bench import encoding, training
    from gpu_bench.backbone import make_backbone
    from gpu_bench.measure import matmul_rate

    device = settings["device"]
    decoder = folder_of(settings, settings["decoder"])
    train = settings["train"]
    if name == "setup":
        import torch

        rate = matmul_rate(device, settings["matmul_size"])
        made = {}
        for shape in settings["shapes"]:
            started = time.perf_counter()
            make_backbone(shape, folder_of(settings, shape), device)
            made[shape] = round(time.perf_counter() - started, 1)
        return {"measured_bf16_matmul_flops" if device == "cuda" else "measured_fp32_matmul_flops": rate,
                "folders_s": made, "torch_threads": torch.get_num_threads()}  # fmt: skip
    if name == "train":
        return training.ours_phase(settings, decoder, False, train["queries"], ["uniform", "mixed"])
    if name == "train_compiled":
        compiled = {**settings, "train": {**train, "chunk_sweep": []}}
        return training.ours_phase(compiled, decoder, True, train["queries"], ["uniform", "mixed"])
    if name == "production_batch":
        light = {**settings, "train": {**train, "warmup": 0, "steps": 1, "profile": False, "chunk_sweep": []}}
        return training.ours_phase(light, decoder, False, settings["production_batch"], ["uniform"])
    if name == "train_st":
        return training.st_phase(settings, decoder, train["queries"])
    if name.startswith("encode_"):
        shapes = {
            "encode_decoder": [settings["decoder"]],
            "encode_mid": [s for s in settings["shapes"][1:2] if s in settings["encode"] and "1.7b" in s],
            "encode_encoders": [s for s in settings["shapes"] if s != settings["decoder"] and "1.7b" not in s],
        }[name]
        return {shape: encoding.encode_phase(settings, shape, folder_of(settings, shape)) for shape in shapes}
    if name == "serve":
        from gpu_bench.serving import serve_phase

        return serve_phase(settings, decoder)
    if name == "train_ray":
        from gpu_bench.ray_train import ray_train_phase

        return ray_train_phase(settings, decoder)
    raise ValueError(f"unknown phase {name!r}")


def phase_main(args: argparse.Namespace) -> int:
    settings = json.loads(Path(args.settings).read_text())
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s [{args.phase}] %(name)s: %(message)s")
    result = run_phase(args.phase, settings)
    Path(args.result).write_text(json.dumps(result, indent=1, default=str))
    return 0


# ----- the run: phases in subprocesses, the result after each -------------------------------------------------


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "host_cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    for name in ("transformers", "peft", "sentence_transformers", "ray"):
        try:
            info[name] = __import__(name).__version__
        except ImportError:
            info[name] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1), cuda=torch.version.cuda)
        try:
            driver = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
            )
            info["driver"] = driver.stdout.strip() or None
        except OSError:
            info["driver"] = None
    else:
        from common import machine_info

        info.update(cpu_model=machine_info()["cpu_model"], gpu=None)
    return info


def run_subprocess(
    name: str, settings_path: Path, work: Path, limit_s: float
) -> tuple[str, dict | None, float, list[str]]:
    """Run one phase in its own process group under `limit_s`, its output passed through as it comes; returns its
    status, its result (or the results it kept so far when it failed or ran out of time, `gpu_bench.measure.keep`),
    its seconds and the last LOG_TAIL lines it printed (where a failed or slow phase says what it was doing)."""
    from gpu_bench.measure import PARTIAL

    result, partial = work / f"{name}.json", work / f"{name}.partial.json"
    result.unlink(missing_ok=True)
    partial.unlink(missing_ok=True)
    cmd = [sys.executable, str(HERE), "--phase", name, "--settings", str(settings_path), "--result", str(result)]
    started = time.perf_counter()
    proc = subprocess.Popen(
        cmd, start_new_session=True, env={**os.environ, PARTIAL: str(partial)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
    )  # fmt: skip
    tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL)

    def relay() -> None:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            tail.append(line.rstrip("\n"))

    reader = threading.Thread(target=relay, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=limit_s)
        status = "ok" if code == 0 and result.is_file() else f"failed (exit {code})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        status = "timeout"
    reader.join(timeout=10)  # the pipe closes with the last process of the group
    seconds = time.perf_counter() - started
    if status == "ok":
        return status, json.loads(result.read_text()), seconds, list(tail)
    return status, json.loads(partial.read_text()) if partial.is_file() else None, seconds, list(tail)


def summarise(doc: dict[str, Any], compiled_profile: bool) -> tuple[dict[str, float], dict[str, str]]:
    """The ratios and goals of the issue from the phases' results (absent phases give no ratio)."""
    from gpu_bench.encoding import best_vs

    r: dict[str, float] = {}
    cosines: list[float] = []
    p = doc["phases"]
    train = p.get("train_compiled" if compiled_profile else "train", {}).get("result") or {}
    st = p.get("train_st", {}).get("result") or {}
    for workload in ("uniform", "mixed"):
        ours = train.get(workload)
        if ours:
            suffix = "" if workload == "uniform" else "_mixed"
            r[f"train_mfu{suffix}"] = ours["mfu_measured"]
            r[f"train_mfu_datasheet{suffix}"] = ours.get("mfu_datasheet", 0.0)
            if st.get(workload):
                r[f"train_tokens_per_s_vs_sentence_transformers{suffix}"] = round(
                    ours["tokens_per_s"] / st[workload]["tokens_per_s"], 3
                )
            r[f"train_peak_gib{suffix}"] = ours["peak_gib"]
    for variant in ("train", "train_compiled"):
        rows = (p.get(variant, {}).get("result") or {}).get("uniform")
        if rows:
            r[f"{variant}_mfu_uniform"] = rows["mfu_measured"]
    prod = (p.get("production_batch", {}).get("result") or {}).get("uniform")
    if prod:
        r["production_batch_fits"] = 1.0
        r["production_batch_peak_gib"] = prod["peak_gib"]
        r["production_batch_mfu"] = prod["mfu_measured"]
    for phase in ("encode_decoder", "encode_mid", "encode_encoders"):
        for shape, res in (p.get(phase, {}).get("result") or {}).items():
            key = shape.replace("-", "_").replace(".", "_")
            for workload, every in res["workloads"].items():
                suffix = "" if workload == "uniform" else "_mixed"
                for only, label in ((True, "_model_only"), (False, "")):
                    rows = [row for row in every if bool(row.get("model_only")) == only]
                    ours = [row for row in rows if row["system"] == "embedforge"]
                    theirs = [row for row in rows if row["system"] != "embedforge"]
                    if ours:
                        r[f"encode_mfu_{key}{suffix}{label}"] = ours[0]["mfu_measured"]
                    if theirs:
                        r[f"encode_mfu_{key}{suffix}{label}_st"] = max(row["mfu_measured"] for row in theirs)
                rows = [row for row in every if not row.get("model_only")]
                ours = [row for row in rows if row["system"] == "embedforge"]
                theirs = [row for row in rows if row["system"] != "embedforge"]
                if ours and theirs:
                    for label, value in best_vs(every).items():
                        r[f"encode_tokens_per_s_{label}_{key}_{workload}"] = value
            if "fast_path_min_cosine_vs_padded" in res:
                cosines.append(res["fast_path_min_cosine_vs_padded"])
    if cosines:
        r["fast_path_min_cosine_vs_padded"] = min(cosines)
    for phase, key in (("production_batch", "production_batch_fits"), ("train_ray", "train_ray_completed")):
        status = p.get(phase, {}).get("status", "skipped")
        if not status.startswith("skipped") and not p[phase].get("result"):
            r[key] = 0.0  # it ran and did not finish
    ray_train = p.get("train_ray", {}).get("result")
    if ray_train:
        r["train_ray_completed"] = 1.0 if ray_train["status"] == "complete" else 0.0
        r["train_ray_tokens_per_s"] = ray_train["throughput"].get("tokens_per_s_median", 0.0)
        r["train_ray_peak_gib"] = round(ray_train["usage"]["peak_accelerator_memory_mb"] / 1024, 2)
    serve = p.get("serve", {}).get("result")
    if serve:
        if "clients" in serve:  # a run with one client count (64)
            serve = {**serve, "served": {str(serve["clients"]): serve["served"]}}
            serve["serve_vs_offline"] = {str(serve["clients"]): p["serve"]["result"]["serve_vs_offline"]}
        most = max(serve["served"], key=int)  # the goal is read at the largest closed loop
        r["serve_vs_offline"] = serve["serve_vs_offline"][most]
        for clients, ratio in serve["serve_vs_offline"].items():
            r[f"serve_vs_offline_{clients}_clients"] = ratio
            r[f"serve_p99_ms_{clients}_clients"] = round(serve["served"][clients]["p99_ms"], 1)
        r["serve_errors"] = sum(row["errors"] for row in serve["served"].values())
    decoder = doc["settings"]["decoder"].replace("-", "_").replace(".", "_")
    encoder = "multilingual_e5_small"
    goals = {
        "train_mfu": ">= 0.40",
        "train_tokens_per_s_vs_sentence_transformers": ">= 1.2",
        f"encode_mfu_{decoder}": ">= 0.60",
        f"encode_tokens_per_s_vs_st_default_{decoder}_mixed": ">= 1.2",
        f"encode_mfu_{encoder}_model_only": ">= 0.45",
        "serve_vs_offline": ">= 0.8",
        "serve_errors": "== 0",
        "production_batch_fits": "== 1",
        "fast_path_min_cosine_vs_padded": ">= 0.999",
        "train_ray_completed": "== 1",
    }
    return r, {k: v for k, v in goals.items() if k in r}


def plot(doc: dict[str, Any], path: Path) -> Path | None:
    """MFU of each workload, embedforge beside sentence-transformers, over the measured matrix-product rate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = doc["phases"]
    bars: list[tuple[str, float, float | None]] = []
    for variant, label in (("train", "train"), ("train_compiled", "train, compiled")):
        res = p.get(variant, {}).get("result") or {}
        st = p.get("train_st", {}).get("result") or {}
        for workload in ("uniform", "mixed"):
            if res.get(workload):
                theirs = st.get(workload, {}).get("mfu_measured") if variant == "train" else None
                bars.append((f"{label}\n{workload}", res[workload]["mfu_measured"], theirs))
    for phase in ("encode_decoder", "encode_mid", "encode_encoders"):
        for shape, res in (p.get(phase, {}).get("result") or {}).items():
            for workload, rows in res["workloads"].items():
                ours = [row["mfu_measured"] for row in rows if row["system"] == "embedforge"]
                theirs = [row["mfu_measured"] for row in rows if row["system"] != "embedforge"]
                if ours:
                    bars.append((f"encode\n{shape}\n{workload}", ours[0], max(theirs) if theirs else None))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(max(8, 1.35 * len(bars)), 4.8))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1] for b in bars], 0.4, label="embedforge")
    ax.bar([x + 0.2 for x in xs], [b[2] or 0 for b in bars], 0.4, label="sentence-transformers (best setting)")
    ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=7)
    ax.set_ylabel("MFU (useful FLOP/s over the measured bf16 matmul rate)")
    gpu = doc["machine"].get("gpu") or doc["machine"].get("cpu_model")
    ax.set_title(f"{gpu}: model FLOPs utilisation", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: the same code, in seconds")
    parser.add_argument("--budget-s", type=float, default=None, help="wall-clock budget (default 360; tiny 900)")
    parser.add_argument("--models-dir", type=Path, default=Path("/tmp/embedforge-gpu-bench"))
    parser.add_argument(
        "--results",
        type=Path,
        help="where gpu.json and gpu.png go (benchmarks/results; with --tiny, beside the models)",
    )
    parser.add_argument("--only", nargs="*", help="run these phases only (setup always runs)")
    parser.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        help="combine the phases of gpu.json files of one machine (later ones win) "
        "into the results, recomputing ratios and plot; runs nothing",
    )
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        return phase_main(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.merge:
        return merge(args.merge, args.results or RESULTS)
    import torch

    if not args.tiny and not torch.cuda.is_available():
        print("error: no CUDA GPU here; `--tiny` runs the same code on tiny shapes on the CPU", file=sys.stderr)
        return 2
    settings = dict(TINY if args.tiny else FULL)
    settings["models_dir"] = str(args.models_dir / ("tiny" if args.tiny else "full"))
    # a tiny run never replaces the committed GPU result
    results = args.results or (Path(settings["models_dir"]) / "results" if args.tiny else RESULTS)
    budget = args.budget_s or (900.0 if args.tiny else 360.0)
    started = time.perf_counter()
    work = Path(settings["models_dir"]) / "phases"
    work.mkdir(parents=True, exist_ok=True)
    from embedforge.model.flops import datasheet_bf16_flops

    doc: dict[str, Any] = {
        "machine": machine(settings["device"]),
        "command": "python benchmarks/gpu.py" + (" --tiny" if args.tiny else ""),
        "settings": settings,
        "phases": {},
    }
    name = doc["machine"].get("gpu") or ""
    sheet = datasheet_bf16_flops(name) if name else None
    settings_path = work / "settings.json"
    compiled_profile = profile_compiles()
    for phase, cap, need in PHASES:
        if args.only and phase != "setup" and phase not in args.only:
            continue
        left = budget - (time.perf_counter() - started)
        missing = [m for m in PHASE_NEEDS.get(phase, ()) if importlib.util.find_spec(m) is None]
        if missing:
            doc["phases"][phase] = {"status": f"skipped: {', '.join(missing)} not installed"}
            log.warning("phase %s skipped: %s not installed", phase, missing)
            continue
        if left < need:
            doc["phases"][phase] = {"status": f"skipped: {left:.0f} s of the budget left, {need} s needed"}
            log.warning("phase %s skipped (%.0f s left)", phase, left)
            continue
        settings_path.write_text(json.dumps(settings))
        log.info("phase %s (at most %.0f s)", phase, min(cap, left))
        status, result, seconds, tail = run_subprocess(phase, settings_path, work, min(cap, left))
        doc["phases"][phase] = {"status": status, "seconds": round(seconds, 1), "result": result}
        if status != "ok":
            doc["phases"][phase]["log_tail"] = tail
            if result is not None:
                doc["phases"][phase]["partial"] = "the phase stopped early; these are the measurements it had made"
        log.info("phase %s: %s in %.0f s", phase, status, seconds)
        if phase == "setup":
            if status != "ok":
                break
            measured = result.get("measured_bf16_matmul_flops") or result["measured_fp32_matmul_flops"]
            settings["peaks"] = {"measured": measured, **({"datasheet": sheet} if sheet else {})}
            doc["peaks_flops_per_s"] = settings["peaks"]
        write(doc, results, compiled_profile)
    doc["wall_s"] = round(time.perf_counter() - started, 1)
    path = write(doc, results, compiled_profile)
    for phase, record in doc["phases"].items():
        print(f"{phase:18s} {record['status']} {record.get('seconds', '')}")
    print(json.dumps(json.loads(path.read_text())["ratios"], indent=1))
    log.info("wrote %s", path)
    return 0 if doc["phases"].get("setup", {}).get("status") == "ok" else 1


def merge(paths: list[Path], results: Path) -> int:
    """One result from several runs' gpu.json on the same machine (e.g. a phase run again in a second call)."""
    docs = [json.loads(p.read_text()) for p in paths]
    gpus = {d["machine"].get("gpu") for d in docs}
    if len(gpus) != 1:
        print(f"error: the results come from different machines ({sorted(map(str, gpus))})", file=sys.stderr)
        return 2
    merged = {key: docs[0][key] for key in ("machine", "command", "settings", "peaks_flops_per_s") if key in docs[0]}
    merged["phases"] = {}
    for doc in docs:  # a later run's phase replaces an earlier one's unless it was skipped there; setup stays the first
        for name, phase in doc["phases"].items():
            ran = not phase["status"].startswith("skipped") and name != "setup"
            if ran or name not in merged["phases"]:
                merged["phases"][name] = phase
    merged["runs"] = [
        {
            "date": d["machine"]["date"],
            "wall_s": d.get("wall_s"),
            "phases": [k for k, v in d["phases"].items() if not v["status"].startswith("skipped")],
        }
        for d in docs
    ]
    print(write(merged, results, profile_compiles()))
    return 0


def profile_compiles() -> bool:
    from embedforge.config import load_config

    return load_config(HERE.parents[1] / "configs" / "nv-embed-v2.yaml").model.compile


def write(doc: dict[str, Any], results: Path, compiled_profile: bool) -> Path:
    ratios, goals = summarise(doc, compiled_profile)
    payload = {**doc, "ratios": ratios, "goals": goals}
    results.mkdir(parents=True, exist_ok=True)
    if results == RESULTS:
        path = write_result("gpu", payload)
    else:
        path = results / "gpu.json"
        path.write_text(json.dumps({"name": "gpu", "date": doc["machine"]["date"], **payload}, indent=2, default=str))
    figure = plot(payload, path.with_suffix(".png"))
    out = os.environ.get("OUT")
    if out and Path(out).resolve() != path.parent.resolve():
        for item in (path, figure):
            if item is not None:
                shutil.copy2(item, Path(out) / item.name)
    return path


if __name__ == "__main__":
    sys.exit(main())
