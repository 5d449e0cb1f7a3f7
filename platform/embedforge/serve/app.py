"""The model deployment: each replica holds the encoder, its token limiter and batcher, and answers the gateway.

Replicas are not reached over HTTP: the gateway (`gateway.py`) calls them through a deployment handle and retries a
request on another replica when its replica dies. A replica returns every answer as a `Reply` (client errors
included), so to the gateway an exception means a lost replica, never a bad request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from ray import serve

from embedforge.cluster.device import usage
from embedforge.config.serve import ServeConfig
from embedforge.serve.errors import APIError, internal_error
from embedforge.serve.metrics import BatchMetrics
from embedforge.serve.service import EmbeddingService

log = logging.getLogger("embedforge.serve")
READY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Reply:
    """One answer: HTTP status, JSON body and the input tokens embedded."""

    status: int
    body: bytes
    tokens: int = 0

    @classmethod
    def error(cls, err: APIError) -> Reply:
        return cls(err.status, json.dumps(err.body()).encode("utf-8"))


@serve.deployment
class EmbeddingDeployment:
    """One model replica: the model, its token limiter and batcher, and the batch metrics."""

    def __init__(self, config: ServeConfig, model: str, model_config: dict[str, Any] | None = None) -> None:
        import torch

        from embedforge.cluster.device import assigned_device, model_dtype
        from embedforge.config.model import ModelConfig
        from embedforge.model import load_encoder

        torch.set_num_threads(config.torch_threads or max(1, round(config.num_cpus)))
        self.config = config
        self.metrics = BatchMetrics()
        started = time.perf_counter()
        self.device = assigned_device()
        settings = None if model_config is None else ModelConfig.model_validate(model_config)
        encoder = load_encoder(model, model_config=settings, device=self.device)
        self.dtype = model_dtype(encoder)
        self.service = EmbeddingService(encoder, config, observe_batch=self.metrics.batch)
        log.info(
            "loaded %s on %s (%s, dimension %d) in %.1fs",
            model,
            self.device,
            self.dtype,
            self.service.dimension,
            time.perf_counter() - started,
        )

    async def embeddings(self, raw: bytes, content_type: str | None) -> Reply:
        """A `/v1/embeddings` body to its answer."""
        try:
            parsed = self.service.parse(raw, content_type)
            body, tokens = await self.service.embed(parsed)
            return Reply(200, body, tokens)
        except APIError as err:
            return Reply.error(err)
        except Exception as err:
            return Reply.error(internal_error(err))

    def models(self) -> dict:
        return self.service.models()

    async def ready(self) -> Reply:
        """200 with the model, its dimension and where it runs once a batch goes through; 503 until then."""
        try:
            texts, counts = self.service.limiter.apply(["ready"], truncate=True)
            await asyncio.wait_for(self.service.batcher.submit(("document", None, ()), texts, counts), READY_TIMEOUT_S)
        except (TimeoutError, APIError):
            return Reply.error(APIError(503, "model not answering yet"))
        ready = {"status": "ready", "model": self.config.model_name, "dimension": self.service.dimension}
        return Reply(200, json.dumps({**ready, "usage": usage(self.device, self.dtype)}).encode("utf-8"))

    def __del__(self) -> None:
        service = getattr(self, "service", None)
        if service is not None:
            service.close()
