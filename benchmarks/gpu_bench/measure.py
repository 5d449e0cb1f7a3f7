"""Timing and memory on the benchmark's device, and the chip's matrix-product rate measured in the same run."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

PARTIAL = "GPU_BENCH_PARTIAL"  # where a phase keeps its results so far (set by benchmarks/gpu.py)


def keep(result: dict[str, Any]) -> None:
    """Write a phase's results so far, so a phase stopped at its time limit still reports what it measured."""
    path = os.environ.get(PARTIAL)
    if path:
        Path(path).write_text(json.dumps(result, default=str))


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: str) -> tuple[float, Any]:
    """Seconds `fn` takes, the device's queued work included, and what it returned."""
    synchronize(device)
    start = time.perf_counter()
    out = fn()
    synchronize(device)
    return time.perf_counter() - start, out


def matmul_rate(device: str, size: int, repeats: int = 20) -> float:
    """FLOP/s of a size^3 matrix product on random data (bf16 on a GPU, float32 on a CPU), best of `repeats`
    after warming up: the ceiling MFU is measured against."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        seconds, _ = timed(lambda: a @ b, device)
        best = min(best, seconds)
    return 2 * size**3 / best


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib(device: str) -> float:
    """The most memory torch allocated on the GPU since the last reset (GiB); 0 on a CPU."""
    return round(torch.cuda.max_memory_allocated() / 2**30, 2) if device == "cuda" else 0.0


def profile(fn: Callable[[], Any], device: str, top: int = 20) -> dict[str, Any]:
    """One call of `fn` under torch.profiler: the `top` operators by their own time on the device (the CPU on a
    CPU), with the share of all that time each took; where the next speed-up is to be found."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        fn()
        synchronize(device)
    field = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = [e for e in prof.key_averages() if getattr(e, field, 0) > 0]
    total = sum(getattr(e, field) for e in events) or 1.0
    events.sort(key=lambda e: -getattr(e, field))
    return {
        "clock": "device" if device == "cuda" else "cpu",
        "total_ms": round(total / 1000, 1),
        "top": [
            {
                "op": e.key[:120],
                "ms": round(getattr(e, field) / 1000, 2),
                "share": round(getattr(e, field) / total, 4),
                "calls": e.count,
            }
            for e in events[:top]
        ],
    }
