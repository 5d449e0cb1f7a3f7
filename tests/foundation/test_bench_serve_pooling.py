"""benchmarks/serve.py pools a server's rounds: every answer over every measured second, percentiles of all."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def bench_serve(load_benchmark):
    return load_benchmark("serve")


def test_rounds_are_pooled_into_one_sample(bench_serve):
    fast = {"latencies_ms": [100.0] * 300, "errors": 0, "duration_s": 10.0}
    slow = {"latencies_ms": [200.0] * 97 + [900.0] * 3, "errors": 2, "duration_s": 10.0}
    stats = bench_serve.pooled([fast, slow], per_request=16)
    assert stats["requests"] == 400 and stats["errors"] == 2
    assert stats["requests_per_s"] == pytest.approx(20.0) and stats["texts_per_s"] == pytest.approx(320.0)
    everything = fast["latencies_ms"] + slow["latencies_ms"]
    assert stats["p99_ms"] == pytest.approx(np.percentile(everything, 99))
    # the slow round's own p99 is one of its three 900 ms answers; pooled with the fast round it is not
    assert stats["rounds_p99_ms"][1] == pytest.approx(900.0) and stats["p99_ms"] < 900.0
    assert stats["rounds_requests_per_s"] == [30.0, 10.0]


def test_a_round_without_answers_has_no_percentiles(bench_serve):
    stats = bench_serve.pooled([{"latencies_ms": [], "errors": 5, "duration_s": 10.0}], per_request=1)
    assert stats["requests"] == 0 and stats["requests_per_s"] == 0.0 and stats["p99_ms"] is None
    assert stats["rounds_p99_ms"] == [None]
