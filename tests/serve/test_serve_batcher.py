"""The token-budget batcher: grouping rule, budgets, one request's inputs together, overload, failures."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest

from embedforge.serve.batcher import TokenBudgetBatcher
from embedforge.serve.errors import APIError


class Recorder:
    """An encode function that records each batch and returns vectors that identify every text."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[tuple[object, list[str]]] = []
        self.fail_on = fail_on

    def __call__(self, key, texts):
        if self.fail_on in texts:
            raise RuntimeError("model exploded")
        self.batches.append((key, list(texts)))
        return np.array([[float(len(t)), float(hash(t) % 997)] for t in texts], dtype=np.float32)


def make(encode, **kw) -> TokenBudgetBatcher:
    args = {"max_batch_tokens": 100, "max_batch_size": 8, "wait_s": 0.02, "max_pending": 100}
    args.update(kw)
    return TokenBudgetBatcher(encode, **args)


def test_concurrent_requests_share_a_batch_and_get_their_own_rows():
    rec = Recorder()

    async def main():
        batcher = make(rec)
        reqs = [[f"r{i}-a", f"r{i}-bb"] for i in range(3)]
        outs = await asyncio.gather(*(batcher.submit("doc", r, [5, 5]) for r in reqs))
        batcher.close()
        return reqs, outs

    reqs, outs = asyncio.run(main())
    assert len(rec.batches) == 1 and len(rec.batches[0][1]) == 6
    for texts, out in zip(reqs, outs, strict=True):
        assert out.shape == (2, 2)
        assert out[:, 0].tolist() == [float(len(t)) for t in texts]


def test_token_budget_splits_batches_by_padded_cost():
    rec = Recorder()

    async def main():
        batcher = make(rec, max_batch_tokens=100)
        # padded cost: 2 texts x 40 tokens = 80 fits; adding 1 more -> 3 x 40 = 120 does not
        await asyncio.gather(batcher.submit("doc", ["a", "b"], [40, 10]), batcher.submit("doc", ["c"], [5]))
        batcher.close()

    asyncio.run(main())
    assert [b[1] for b in rec.batches] == [["a", "b"], ["c"]]


def test_oversized_request_goes_alone_and_whole():
    rec = Recorder()

    async def main():
        batcher = make(rec, max_batch_tokens=100, max_batch_size=4)
        big = [f"t{i}" for i in range(10)]
        out = await batcher.submit("doc", big, [50] * 10)
        batcher.close()
        return out

    out = asyncio.run(main())
    assert out.shape == (10, 2)
    assert rec.batches == [("doc", [f"t{i}" for i in range(10)])]


def test_different_keys_never_mix_and_order_is_kept():
    rec = Recorder()

    async def main():
        batcher = make(rec)
        await asyncio.gather(
            batcher.submit(("query", None), ["q1"], [3]),
            batcher.submit(("document", None), ["d1"], [3]),
            batcher.submit(("query", None), ["q2"], [3]),
        )
        batcher.close()

    asyncio.run(main())
    assert rec.batches == [(("query", None), ["q1", "q2"]), (("document", None), ["d1"])]


def test_overload_answers_503_immediately():
    rec = Recorder()

    async def main():
        batcher = make(rec, max_pending=2, wait_s=0.05)
        first = [asyncio.ensure_future(batcher.submit("doc", [f"x{i}"], [1])) for i in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(APIError) as err:
            await batcher.submit("doc", ["late"], [1])
        await asyncio.gather(*first)
        batcher.close()
        return err.value

    err = asyncio.run(main())
    assert err.status == 503 and "overloaded" in err.message


def test_a_failing_batch_fails_its_requests_and_the_batcher_goes_on():
    rec = Recorder(fail_on="boom")

    async def main():
        batcher = make(rec)
        with pytest.raises(RuntimeError, match="model exploded"):
            await batcher.submit("doc", ["boom"], [1])
        out = await batcher.submit("doc", ["fine"], [1])
        batcher.close()
        return out

    assert asyncio.run(main()).shape == (1, 2)


def test_requests_that_queued_during_a_batch_do_not_wait_again():
    """`wait_s` counts from the oldest request's arrival: after a long batch the next one starts at once."""
    spans: list[tuple[float, float]] = []

    def slow(key, texts):
        start = time.monotonic()
        time.sleep(0.3)
        spans.append((start, time.monotonic()))
        return np.zeros((len(texts), 2), dtype=np.float32)

    async def main():
        batcher = make(slow, wait_s=0.2)
        first = asyncio.ensure_future(batcher.submit("doc", ["a"], [1]))
        await asyncio.sleep(0.25)  # the first batch is encoding; this request queues behind it
        await asyncio.gather(first, batcher.submit("doc", ["b"], [1]))
        arrived_alone = time.monotonic()
        await batcher.submit("doc", ["c"], [1])  # an idle batcher still waits for company
        batcher.close()
        return arrived_alone

    arrived_alone = asyncio.run(main())
    (_, first_end), (second_start, _), (third_start, _) = spans
    assert second_start - first_end < 0.1  # it had waited 0.25 s already; before: a further 0.2 s
    assert third_start - arrived_alone >= 0.19
