"""Mining memory that does not grow with the corpus (issue 24): block-by-block exact search equals a flat index,
no corpus or cache file stays mapped after a read, and the mining driver (which hands models to Ray actors)
never loads torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embedforge.config.mine import MineConfig
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.mine.index import BlockedExactSearch, build_index, corpus_index, read_rows, search


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _mapped(path: Path) -> bool:
    return str(path) in Path(f"/proc/{os.getpid()}/maps").read_text()


@pytest.mark.parametrize("block_rows", [7, 64, 1000])
def test_block_by_block_search_equals_the_flat_index(tmp_path, block_rows):
    docs, queries = _unit(300, 16, 0), _unit(12, 16, 1)
    np.save(tmp_path / "corpus.npy", docs)
    scores, ids = search(BlockedExactSearch(tmp_path / "corpus.npy", block_rows), queries, 10)
    flat_scores, flat_ids = search(build_index(docs, MineConfig()), queries, 10)
    np.testing.assert_array_equal(ids, flat_ids)
    np.testing.assert_allclose(scores, flat_scores, rtol=1e-5)


def test_corpus_index_searches_in_blocks_only_past_the_memory_budget(tmp_path):
    path = tmp_path / "corpus.npy"
    np.save(path, _unit(3000, 256, 2))  # 3 MiB of vectors; 1 MiB holds 1024 of them
    blocked = corpus_index(path, MineConfig(search_memory_mb=1, use_gpu="never"))
    assert isinstance(blocked, BlockedExactSearch) and blocked.block_rows == 1024
    assert not isinstance(corpus_index(path, MineConfig(search_memory_mb=4)), BlockedExactSearch)
    assert not isinstance(corpus_index(path, MineConfig(search_memory_mb=1, index="hnsw")), BlockedExactSearch)


def test_reads_leave_no_corpus_or_cache_file_mapped(tmp_path):
    path = tmp_path / "corpus.npy"
    np.save(path, _unit(50, 8, 3))
    np.testing.assert_array_equal(read_rows(path, slice(10, 20)), np.load(path)[10:20])
    BlockedExactSearch(path, 16).search(_unit(2, 8, 4), 5)
    assert not _mapped(path)
    cache = EmbeddingCache(tmp_path / "cache", "identity")
    texts = [f"text {i}" for i in range(6)]
    cache.put(texts[:3], _unit(3, 8, 5))
    cache.put(texts[3:], _unit(3, 8, 6))
    assert cache.get(texts[::-1]).shape == (6, 8)
    assert not any(_mapped(f) for f in cache.dir.glob("*.vecs.npy"))


def test_the_mining_driver_does_not_load_torch():
    code = "import sys, embedforge.mine.run; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
