"""The retry rule of the gateway, without Ray: only a lost replica is retried, with doubling waits, a bounded number
of times."""

from __future__ import annotations

import asyncio

import pytest

from embedforge.serve.retry import NoReplicaAnswered, with_retries


class Lost(Exception):
    pass


def flaky(failures: list[BaseException], calls: list[int]):
    async def call() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "vectors"

    return call


def run(call, attempts=3, backoff=0.0):
    return asyncio.run(with_retries(call, lambda e: isinstance(e, Lost), attempts, backoff))


def test_a_lost_replica_is_retried_until_one_answers():
    calls: list[int] = []
    assert run(flaky([Lost(), Lost()], calls)) == ("vectors", 3)
    assert len(calls) == 3


def test_tries_are_bounded_and_the_last_loss_is_kept():
    calls: list[int] = []
    with pytest.raises(NoReplicaAnswered, match="no replica answered in 3 tries") as err:
        run(flaky([Lost(), Lost(), Lost("third")], calls))
    assert len(calls) == 3 and str(err.value.last) == "third"


def test_other_failures_are_never_retried():
    calls: list[int] = []
    with pytest.raises(ValueError, match="bad"):
        run(flaky([ValueError("bad")], calls))
    assert len(calls) == 1


def test_waits_double_between_tries(monkeypatch):
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    assert run(flaky([Lost(), Lost(), Lost()], []), attempts=4, backoff=0.2) == ("vectors", 4)
    assert waits == pytest.approx([0.2, 0.4, 0.8])


def test_at_least_one_try():
    with pytest.raises(ValueError, match="max_attempts"):
        run(flaky([], []), attempts=0)
