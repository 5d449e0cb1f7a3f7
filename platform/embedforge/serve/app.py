"""The HTTP layer and the Ray Serve deployment: `/v1/embeddings`, `/v1/models`, `/health`, `/ready`.

Errors leave in the OpenAI shape (`errors.py`); anything unexpected is logged in the replica with its stack
trace and the client only sees a 500 with a request id. `/health` and `/ready` need no key (they are probes).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from embedforge.cluster.device import usage
from embedforge.config.serve import ServeConfig
from embedforge.serve.auth import KeyChecker
from embedforge.serve.errors import APIError
from embedforge.serve.metrics import ServeMetrics
from embedforge.serve.service import EmbeddingService

log = logging.getLogger("embedforge.serve")
READY_TIMEOUT_S = 10.0

api = FastAPI(title="embedforge embeddings", docs_url=None, redoc_url=None, openapi_url=None)


def error_response(err: APIError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


@api.exception_handler(APIError)
async def _api_error(_: Request, err: APIError) -> JSONResponse:
    return error_response(err)


@api.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
    message = {
        404: f"no route {request.url.path}",
        405: f"method {request.method} not allowed on {request.url.path}",
    }.get(err.status_code, str(err.detail))
    return error_response(APIError(err.status_code, message))


def internal_error(err: Exception) -> JSONResponse:
    """Log the stack trace under a request id; the client gets only the id."""
    request_id = uuid.uuid4().hex[:12]
    log.error("request %s failed", request_id, exc_info=err)
    return error_response(APIError(500, f"internal error (request id {request_id})"))


@api.exception_handler(Exception)
async def _unexpected(_: Request, err: Exception) -> JSONResponse:
    return internal_error(err)


@serve.deployment
@serve.ingress(api)
class EmbeddingDeployment:
    """One replica: the model, its token limiter and batcher, the key checker and the metrics."""

    def __init__(self, config: ServeConfig, model: str, key_digests: list[bytes]) -> None:
        import torch

        from embedforge.cluster.device import assigned_device, model_dtype
        from embedforge.model import load_encoder

        torch.set_num_threads(config.torch_threads or max(1, round(config.num_cpus)))
        self.config = config
        self.keys = KeyChecker(key_digests)
        self.metrics = ServeMetrics()
        started = time.perf_counter()
        self.device = assigned_device()
        encoder = load_encoder(model, device=self.device)
        self.dtype = model_dtype(encoder)
        self.service = EmbeddingService(encoder, config, observe_batch=self.metrics.batch)
        log.info(
            "loaded %s on %s (%s, dimension %d) in %.1fs, API keys %s",
            model,
            self.device,
            self.dtype,
            self.service.dimension,
            time.perf_counter() - started,
            "on" if self.keys.enabled else "off",
        )

    @api.post("/v1/embeddings")
    async def embeddings(self, request: Request) -> Response:
        started, status, tokens = time.perf_counter(), 200, 0
        try:
            self.keys.check(request.headers.get("authorization"))
            declared = request.headers.get("content-length")
            limit = self.config.limits.max_body_bytes
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise APIError(413, f"body is {declared} bytes, the limit is {limit}", "body")
            parsed = self.service.parse(await request.body(), request.headers.get("content-type"))
            body, tokens = await self.service.embed(parsed)
            return Response(body, media_type="application/json")
        except APIError as err:
            status = err.status
            return error_response(err)
        except Exception as err:
            status = 500
            return internal_error(err)
        finally:
            self.metrics.request(status, time.perf_counter() - started, tokens)

    @api.get("/v1/models")
    async def models(self, request: Request) -> JSONResponse:
        self.keys.check(request.headers.get("authorization"))
        return JSONResponse(self.service.models())

    @api.get("/health")
    async def health(self) -> JSONResponse:
        return JSONResponse({"status": "alive"})

    @api.get("/ready")
    async def ready(self) -> JSONResponse:
        try:
            texts, counts = self.service.limiter.apply(["ready"], truncate=True)
            await asyncio.wait_for(self.service.batcher.submit(("document", None, ()), texts, counts), READY_TIMEOUT_S)
        except (TimeoutError, APIError):
            return error_response(APIError(503, "model not answering yet"))
        ready = {"status": "ready", "model": self.config.model_name, "dimension": self.service.dimension}
        return JSONResponse({**ready, "usage": usage(self.device, self.dtype)})

    def __del__(self) -> None:
        service = getattr(self, "service", None)
        if service is not None:
            service.close()
