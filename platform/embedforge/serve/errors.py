"""Client errors in the OpenAI error shape: `{"error": {"message", "type", "param", "code"}}`.

Every rejection names the problem (the field and what is wrong with it); nothing else reaches the client, so
stack traces stay in the replica's log.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

log = logging.getLogger("embedforge.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "overloaded_error",
}


@dataclass
class APIError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return f"{self.status}: {self.message}"

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def internal_error(err: BaseException) -> APIError:
    """A 500 for an unexpected exception: its stack trace is logged under a request id, the client gets the id."""
    request_id = uuid.uuid4().hex[:12]
    log.error("request %s failed", request_id, exc_info=err)
    return APIError(500, f"internal error (request id {request_id})")
