"""vLLM engine layout on CPU: in one process (embedforge's CPU default) against vLLM's multiprocess default.

The same guided step-2 prompts as `benchmarks/synth.py` (configs/local.yaml generator settings) go through an
engine built by `embedforge.synth.engine.build_engine` with `in_process` true and false. Each mode runs in its own
child process and process group, stopped group-wide at the end, so no engine process outlives its measurement.
Reported: engine start seconds and generated tokens/s of each, and the in-process / multiprocess ratios.
Writes benchmarks/results/synth_engine.json.

    .venv/bin/python benchmarks/synth_engine.py [--prompts 16] [--config configs/local.yaml]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_result

log = logging.getLogger("bench.synth_engine")
MODES = {"in_process": True, "multiprocess": False}


def worker(mode: str, config_path: str, n_prompts: int, out: Path) -> None:
    """One engine in this process's layout `mode`, timed on `n_prompts` guided prompts."""
    from synth import _prompts, generate_rows

    from embedforge.config import load_config
    from embedforge.synth.engine import EngineSettings, build_engine

    config = load_config(config_path)
    settings = replace(EngineSettings.from_config(config.synth.generator), in_process=MODES[mode])
    rows = _prompts(config, n_prompts)
    started = time.time()
    llm = build_engine(settings)
    start_s = time.time() - started
    gens, seconds = generate_rows(llm, settings, rows)
    tokens = sum(g.output_tokens for g in gens)
    result = {"engine_start_s": start_s, "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}
    out.write_text(json.dumps(result))


def run_mode(mode: str, args: argparse.Namespace, out: Path) -> dict:
    me = [sys.executable, str(Path(__file__).resolve())]
    cmd = [*me, "--worker", mode, "--out", str(out), "--prompts", str(args.prompts), "--config", str(args.config)]
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        code = proc.wait(timeout=args.timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):  # vLLM's engine-core and worker processes go with it
            os.killpg(proc.pid, signal.SIGKILL)
    if code != 0:
        raise RuntimeError(f"{mode} worker exited with {code}")
    result = json.loads(out.read_text())
    log.info(
        "%s: engine start %.1fs, %d tokens in %.1fs = %.1f tokens/s",
        mode,
        result["engine_start_s"],
        result["tokens"],
        result["seconds"],
        result["tokens_per_s"],
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--config", type=Path, default=Path(__file__).resolve().parents[1] / "configs" / "local.yaml")
    parser.add_argument("--timeout", type=float, default=1200, help="seconds per mode")
    parser.add_argument("--worker", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.worker:
        worker(args.worker, str(args.config), args.prompts, args.out)
        return
    from embedforge.models.bundled import prepare

    prepare(["smollm2-135m-instruct"])
    with tempfile.TemporaryDirectory() as tmp:
        results = {mode: run_mode(mode, args, Path(tmp) / f"{mode}.json") for mode in MODES}
    inproc, multi = results["in_process"], results["multiprocess"]
    ratios = {
        "tokens_per_s_in_process_vs_multiprocess": inproc["tokens_per_s"] / multi["tokens_per_s"],
        "engine_start_multiprocess_vs_in_process": multi["engine_start_s"] / inproc["engine_start_s"],
    }
    path = write_result(
        "synth_engine",
        {
            "machine": machine_info(),
            "setup": {"prompts": args.prompts, "config": str(args.config), "guided": True},
            "results": results,
            "ratios": ratios,
            "goals": {"tokens_per_s_in_process_vs_multiprocess": ">= 1.0"},
        },
    )
    print(json.dumps(ratios, indent=2), f"\nwritten {path}")


if __name__ == "__main__":
    main()
