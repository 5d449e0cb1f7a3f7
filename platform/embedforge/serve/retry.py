"""Retrying idempotent work on another replica when the one holding it dies (no Ray in here).

An embedding request changes nothing on the server, so sending it again after its replica died mid-request is
safe; any other failure (a client error, a bug, backpressure) is not a lost replica and is never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class NoReplicaAnswered(Exception):
    """Every try of a request lost its replica."""

    def __init__(self, attempts: int, last: BaseException) -> None:
        super().__init__(f"no replica answered in {attempts} tries (last: {type(last).__name__})")
        self.attempts = attempts
        self.last = last


async def with_retries(
    call: Callable[[], Awaitable[T]],
    is_replica_loss: Callable[[BaseException], bool],
    max_attempts: int,
    backoff_s: float,
) -> tuple[T, int]:
    """The result of `call()` and the tries it took. A failure `is_replica_loss` accepts is retried after
    `backoff_s`, doubled before each further try, up to `max_attempts` tries (then `NoReplicaAnswered`); any other
    exception propagates at once."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    delay, attempt = backoff_s, 1
    while True:
        try:
            return await call(), attempt
        except Exception as err:
            if not is_replica_loss(err):
                raise
            if attempt == max_attempts:
                raise NoReplicaAnswered(attempt, err) from err
        attempt += 1
        log.warning("a replica was lost during a request; try %d of %d", attempt, max_attempts)
        await asyncio.sleep(delay)
        delay *= 2
