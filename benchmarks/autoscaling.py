"""What clients feel while the endpoint scales: a load step up, then back to nothing, on a live deployment.

The served model is all-MiniLM-L6-v2 (bundled) behind embedforge's gateway, autoscaled by the serve section's
default policy (1 to 2 model replicas). A closed-loop load of `--clients` threads (4 texts per request) starts at
t = 0 and stops at `--load-s`; sampling goes on until the deployment is back at its minimum. Every answer is
recorded with its start time, latency and status; the replica count is sampled every 0.5 s. Reported (ratios):
errors (any answer but 200, goal 0), the p99 latency while replicas were being added over the p99 of the steady
state after the last one came up (goal <= 2), errors while replicas were removed (scale-down drains in-flight
requests: goal 0), and whether the deployment went back to its minimum. Writes
benchmarks/results/autoscaling.json and autoscaling.png.

    .venv/bin/python benchmarks/autoscaling.py [--clients 8] [--load-s 60]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import httpx
import numpy as np

from embedforge.config.serve import AutoscalingConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine_info, write_result

log = logging.getLogger("bench.autoscaling")
APP = "ef-autoscaling"
TEXTS = [f"a sentence about scaling an embedding service, number {i}" for i in range(4)]
# what a user gets: the serve section's default autoscaling policy (1-2 replicas, 4 ongoing requests per replica,
# 10 s up / 60 s down delays, load reported every 10 s over 30 s)
AUTOSCALING = AutoscalingConfig().model_dump()


def running_replicas() -> int:
    from ray import serve

    status = serve.status().applications[APP].deployments[APP]
    counts = {str(getattr(k, "value", k)): v for k, v in status.replica_states.items()}
    return int(counts.get("RUNNING", 0))


def load(url: str, clients: int, stop: threading.Event, answers: list[tuple[float, float, int]], t0: float) -> None:
    lock = threading.Lock()

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status = http.post(f"{url}/v1/embeddings", json={"model": APP, "input": TEXTS}).status_code
                except httpx.HTTPError:
                    status = -1
                with lock:
                    answers.append((started - t0, time.monotonic() - started, status))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def p99_ms(answers: list[tuple[float, float, int]], start: float, end: float) -> float | None:
    window = [latency for t, latency, _ in answers if start <= t < end]
    return float(np.percentile(window, 99) * 1000) if len(window) >= 10 else None


def summarise(answers: list[tuple[float, float, int]], samples: list[tuple[float, int]], load_s: float) -> dict:
    """Phases from the replica samples: scale-up from the load's start until the last replica ran, steady from then
    to the load's end, scale-down from the load's end until the count was back at the minimum."""
    peak = max(n for _, n in samples)
    up_done = next(t for t, n in samples if n == peak)
    down_done = next((t for t, n in samples if t >= load_s and n == AUTOSCALING["min_replicas"]), None)
    errors = sum(1 for *_, status in answers if status != 200)
    during_up = p99_ms(answers, 0.0, up_done)
    steady = p99_ms(answers, up_done, load_s)
    return {
        "answers": len(answers),
        "errors": errors,
        "peak_replicas": peak,
        "scale_up_s": round(up_done, 1),
        "scale_down_s": None if down_done is None else round(down_done - load_s, 1),
        "p99_ms_during_scale_up": during_up,
        "p99_ms_steady": steady,
        "errors_during_scale_down": sum(1 for t, _, s in answers if t >= load_s and s != 200),
    }


def plot(answers: list[tuple[float, float, int]], samples: list[tuple[float, int]], load_s: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    top.step([t for t, _ in samples], [n for _, n in samples], where="post")
    top.set_ylabel("running replicas")
    top.axvline(load_s, color="grey", linestyle="--", linewidth=0.8)
    edges = np.arange(0, max(t for t, _ in samples) + 2, 2.0)
    for q, label in ((50, "p50"), (99, "p99")):
        values = []
        for start in edges[:-1]:
            window = [lat for t, lat, _ in answers if start <= t < start + 2]
            values.append(np.percentile(window, q) * 1000 if window else np.nan)
        bottom.plot(edges[:-1], values, label=label)
    errors = [t for t, _, s in answers if s != 200]
    if errors:
        bottom.scatter(errors, [0] * len(errors), color="red", marker="x", label="errors")
    bottom.set_ylabel("latency (ms, 2 s windows)")
    bottom.set_xlabel("seconds since the load started (dashed: load stops)")
    bottom.legend()
    fig.suptitle("embedforge endpoint under a load step: replicas and latency")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--load-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=150.0, help="longest wait for the scale-down after the load")
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    import ray
    from ray import serve

    from embedforge.config.serve import ServeConfig
    from embedforge.serve.deploy import deploy

    machine = machine_info()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    config = ServeConfig(
        name=APP, model_name=APP, num_cpus=0.5, torch_threads=1, access_log=False, autoscaling=AUTOSCALING
    )
    url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=300)
    answers: list[tuple[float, float, int]] = []
    samples: list[tuple[float, int]] = []
    stop = threading.Event()
    t0 = time.monotonic()
    loader = threading.Thread(target=load, args=(url, args.clients, stop, answers, t0))
    loader.start()
    while True:
        now = time.monotonic() - t0
        samples.append((now, running_replicas()))
        if now >= args.load_s and not stop.is_set():
            stop.set()
            log.info("load stopped after %.0f s: %d answers", now, len(answers))
        settled = stop.is_set() and samples[-1][1] == AUTOSCALING["min_replicas"] and max(n for _, n in samples) > 1
        if settled or now >= args.load_s + args.settle_s:
            break
        time.sleep(0.5)
    loader.join()
    serve.delete(APP)
    summary = summarise(answers, samples, args.load_s)
    log.info("%s", summary)
    plot(answers, samples, args.load_s, RESULTS / "autoscaling.png")
    ratio = (
        summary["p99_ms_during_scale_up"] / summary["p99_ms_steady"]
        if summary["p99_ms_during_scale_up"] and summary["p99_ms_steady"]
        else None
    )
    ratios: dict[str, Any] = {
        "errors": summary["errors"],
        "errors_during_scale_down": summary["errors_during_scale_down"],
        "back_to_min_replicas": int(summary["scale_down_s"] is not None),
        "p99_during_scale_up_over_steady": None if ratio is None else round(ratio, 2),
    }
    path = write_result(
        "autoscaling",
        {
            "machine": machine,
            "settings": {
                "clients": args.clients,
                "load_s": args.load_s,
                "texts_per_request": len(TEXTS),
                "autoscaling": AUTOSCALING,
                "replica_num_cpus": config.num_cpus,
            },
            "summary": summary,
            "raw": {"replicas": samples, "answers": [[round(t, 3), round(lat, 4), s] for t, lat, s in answers]},
            "ratios": {k: v for k, v in ratios.items() if v is not None},
            "goals": {
                "errors": "== 0",
                "errors_during_scale_down": "== 0",
                "back_to_min_replicas": "== 1",
                "p99_during_scale_up_over_steady": "<= 2.0",
            },
        },
    )
    print(path.read_text()[:2000])


if __name__ == "__main__":
    main()
