"""Timing and memory on the benchmark's device, and the chip's matrix-product rate measured in the same run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch


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
