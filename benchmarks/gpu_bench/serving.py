"""Serving: one Ray Serve replica of embedforge's deployment on the GPU, under a closed loop of many HTTP clients
(benchmarks/serve.py's load generator), against the same model's offline `encode` of the same texts on the same
device: what Ray Serve, HTTP and dynamic batching cost."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from embedforge.config.model import ModelConfig

from .measure import timed
from .texts import TextCutter

log = logging.getLogger("bench.gpu.serve")
MODEL_NAME = "gpu-bench"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_phase(settings: dict[str, Any], folder: Path) -> dict[str, Any]:
    import ray

    from embedforge.config.serve import ServeConfig
    from embedforge.model import load_encoder
    from embedforge.serve.deploy import deploy

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from serve import closed_loop, pooled

    device, plan, length = settings["device"], settings["serve"], settings["max_length"]
    gpu = device == "cuda"
    model_config = ModelConfig(
        backbone=str(folder), pooling="mean", bidirectional=True, max_query_length=length, max_doc_length=length
    )
    config = ServeConfig.model_validate(
        {
            "name": "gpu-bench",
            "model_name": MODEL_NAME,
            "port": free_port(),
            "num_cpus": plan["replica_cpus"],
            "num_gpus": 1 if gpu else 0,
            "access_log": False,
            "max_ongoing_requests": 4 * max(plan["clients"]),
            "max_queued_requests": 16 * max(plan["clients"]),
            "autoscaling": {"min_replicas": 1, "max_replicas": 1},
            "limits": {"max_tokens_per_input": length},
            "batching": {
                "max_batch_tokens": plan["batch"] * length,
                "max_batch_size": 4 * plan["batch"],
                "micro_batch_size": plan["batch"],
            },
        }
    )
    os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    ray.init(
        address="local", num_cpus=os.cpu_count(), num_gpus=1 if gpu else 0, include_dashboard=False,
        log_to_driver=False,
    )  # fmt: skip
    try:
        url = deploy(config, str(folder), wait_ready_s=600, model_config=model_config)
        endpoint = f"{url.rstrip('/')}/v1/embeddings"
        from transformers import AutoTokenizer

        texts = TextCutter(AutoTokenizer.from_pretrained(folder)).mixed(plan["texts"], 16, length, seed=7)
        served = {}
        for clients in plan["clients"]:  # a closed loop keeps `clients` requests outstanding
            run = asyncio.run(
                closed_loop(endpoint, texts, 1, clients, plan["warmup_s"], plan["duration_s"], MODEL_NAME)
            )
            served[str(clients)] = {k: v for k, v in pooled([run], 1).items() if not k.startswith("rounds_")}
            log.info("%d clients: %s", clients, served[str(clients)])
        # the same model, loaded as the replica loads it, on the same device, while the replica idles
        encoder = load_encoder(str(folder), model_config, device=device)
        encoder.encode_documents(texts[: plan["batch"]], batch_size=plan["batch"])
        seconds, _ = timed(lambda: encoder.encode_documents(texts, batch_size=plan["batch"]), device)
    finally:
        ray.shutdown()  # the cluster and its Serve application with it (Serve's own shutdown waits up to 30 s)
    offline = {"texts": len(texts), "seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds, 1)}
    log.info("offline %s", offline)
    return {
        "texts_per_request": 1,
        "served": served,
        "offline": offline,
        "serve_vs_offline": {n: round(row["texts_per_s"] / offline["texts_per_s"], 3) for n, row in served.items()},
    }
