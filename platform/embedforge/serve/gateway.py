"""The HTTP front of the application: `/v1/embeddings`, `/v1/models`, `/health`, `/ready`.

The gateway checks API keys and the declared body size, then hands the body to a model replica (`app.py`) through
a deployment handle. A replica that dies with the request in flight loses nothing the client sent: the request is
idempotent, so it goes to another replica (`serve.gateway.max_attempts` tries, `retry.py`); with no replica
answering, the client gets a 503 with Retry-After, never a 500. Model backpressure (a full replica queue) is a 503
with Retry-After at once. Errors leave in the OpenAI shape (`errors.py`); anything unexpected is logged with its
stack trace and the client only sees a 500 with a request id. `/health` and `/ready` need no key (they are probes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve
from ray.exceptions import RayActorError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, ReplicaUnavailableError
from ray.serve.handle import DeploymentHandle
from starlette.exceptions import HTTPException as StarletteHTTPException

from embedforge.config.serve import ServeConfig
from embedforge.serve.app import Reply
from embedforge.serve.auth import KeyChecker, digests_from_file
from embedforge.serve.errors import APIError, internal_error
from embedforge.serve.metrics import RequestMetrics
from embedforge.serve.retry import NoReplicaAnswered, with_retries

T = TypeVar("T")
READY_TIMEOUT_S = 15.0
# the gateway only awaits replicas: backpressure belongs to the model deployment's own queue
GATEWAY_MAX_ONGOING_REQUESTS = 4096

api = FastAPI(title="embedforge embeddings", docs_url=None, redoc_url=None, openapi_url=None)


def error_response(err: APIError, retry_after_s: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None and err.status == 503 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


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


@api.exception_handler(Exception)
async def _unexpected(_: Request, err: Exception) -> JSONResponse:
    return error_response(internal_error(err))


def replica_lost(err: BaseException) -> bool:
    """A failure that says the replica went away (died, unreachable, replaced), not that the request was bad."""
    return isinstance(err, RayActorError | ReplicaUnavailableError | DeploymentUnavailableError)


@serve.deployment
@serve.ingress(api)
class EmbeddingGateway:
    def __init__(self, config: ServeConfig, key_digests: list[bytes], model: DeploymentHandle) -> None:
        self.config = config
        key_file = config.api_keys_file
        reload = (lambda: digests_from_file(key_file)) if key_file is not None else None
        self.keys = KeyChecker(key_digests, reload, config.api_keys_reload_s)
        self.model = model
        self.metrics = RequestMetrics()

    async def _call(self, call: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """The replica's answer and the tries it took; a lost replica or a full queue becomes a 503 `APIError`."""
        gateway = self.config.gateway
        try:
            return await with_retries(call, replica_lost, gateway.max_attempts, gateway.backoff_s)
        except NoReplicaAnswered as err:
            raise APIError(503, f"no model replica answered ({err.attempts} tries); retry later") from None
        except BackPressureError:
            raise APIError(503, "the model replicas' queues are full; retry later") from None

    @api.post("/v1/embeddings")
    async def embeddings(self, request: Request) -> Response:
        started, status, tokens, tries = time.perf_counter(), 200, 0, 1
        try:
            self.keys.check(request.headers.get("authorization"))
            declared = request.headers.get("content-length")
            limit = self.config.limits.max_body_bytes
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise APIError(413, f"body is {declared} bytes, the limit is {limit}", "body")
            raw, content_type = await request.body(), request.headers.get("content-type")
            reply: Reply
            reply, tries = await self._call(lambda: self.model.embeddings.remote(raw, content_type))
            status, tokens = reply.status, reply.tokens
            return Response(reply.body, status_code=reply.status, media_type="application/json")
        except APIError as err:
            status = err.status
            return error_response(err, self.config.gateway.retry_after_s)
        except Exception as err:
            status = 500
            return error_response(internal_error(err))
        finally:
            self.metrics.request(status, time.perf_counter() - started, tokens, tries - 1)

    @api.get("/v1/models")
    async def models(self, request: Request) -> JSONResponse:
        self.keys.check(request.headers.get("authorization"))
        try:
            listing, _ = await self._call(lambda: self.model.models.remote())
        except APIError as err:
            return error_response(err, self.config.gateway.retry_after_s)
        return JSONResponse(listing)

    @api.get("/health")
    async def health(self) -> JSONResponse:
        return JSONResponse({"status": "alive"})

    @api.get("/ready")
    async def ready(self) -> Response:
        try:
            reply, _ = await asyncio.wait_for(self._call(lambda: self.model.ready.remote()), READY_TIMEOUT_S)
        except (TimeoutError, APIError):
            return error_response(APIError(503, "model not answering yet"), self.config.gateway.retry_after_s)
        return Response(reply.body, status_code=reply.status, media_type="application/json")
