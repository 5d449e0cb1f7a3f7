"""Freed heap memory goes back to the OS between batches (cluster/heap.py)."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

import psutil
import pytest

from embedforge.cluster.heap import release_freed_memory


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is a glibc function")
def test_release_gives_freed_heap_pages_back():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    process = psutil.Process()
    # ~200 MB of touched heap chunks below glibc's mmap threshold, each followed by a small chunk that stays: freed,
    # they leave holes between live chunks, as batches of ever-changing sizes do, which the heap keeps
    chunks, pins = [], []
    for _ in range(2_000):
        chunks.append(libc.malloc(100_000))
        ctypes.memset(chunks[-1], 1, 100_000)
        pins.append(libc.malloc(20_000))  # a size no free list has to spare: it lands right after the chunk
    for chunk in chunks:
        libc.free(chunk)
    before = process.memory_info().rss
    assert release_freed_memory()
    after = process.memory_info().rss
    for pin in pins:
        libc.free(pin)
    assert before - after > 100 * 2**20, (before, after)
