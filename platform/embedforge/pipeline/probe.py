"""One real request to a deployed embedder: proves the endpoint answers with an embedding of the right shape."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Any

from embedforge.config import EmbedforgeConfig

PROBE_TEXT = "embedforge pipeline check: is the deployed embedder answering?"


def base_url(endpoint: str) -> str:
    """The server root, whether `endpoint` is given as the root or as its OpenAI-style `/v1` base."""
    url = endpoint.rstrip("/")
    return url.removesuffix("/v1")


def api_key(config: EmbedforgeConfig) -> str | None:
    """The first key from the env var `serve.api_keys_env` names, when the deployment requires keys."""
    if not config.serve.api_keys_env:
        return None
    keys = [k.strip() for k in os.environ.get(config.serve.api_keys_env, "").split(",") if k.strip()]
    return keys[0] if keys else None


def embed(endpoint: str, config: EmbedforgeConfig, texts: list[str], timeout: float = 60.0) -> list[list[float]]:
    """POST /v1/embeddings and return the vectors; an HTTP error raises with the server's message."""
    body = json.dumps({"input": texts, "model": config.serve.model_name}).encode()
    headers = {"Content-Type": "application/json"}
    key = api_key(config)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{base_url(endpoint)}/v1/embeddings", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        payload = json.loads(resp.read())
    return [item["embedding"] for item in sorted(payload["data"], key=lambda d: d["index"])]


def probe_endpoint(endpoint: str, config: EmbedforgeConfig) -> dict[str, Any]:
    """Embed one text; return its dimension, L2 norm and the round-trip time."""
    started = time.perf_counter()
    (vector,) = embed(endpoint, config, [PROBE_TEXT])
    seconds = time.perf_counter() - started
    if not vector:
        raise RuntimeError(f"{endpoint} returned an empty embedding")
    norm = sum(x * x for x in vector) ** 0.5
    return {"dimension": len(vector), "norm": round(norm, 6), "seconds": round(seconds, 3)}
