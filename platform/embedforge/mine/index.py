"""faiss inner-product index over L2-normalised teacher embeddings (recipe section 5).

`exact` is a flat inner-product index (exact top-k); `ivf` (IVF-Flat, trained on a sample) and `hnsw` trade a
little recall for speed on large corpora. With a visible GPU and `use_gpu: auto` exact and IVF indexes move to
the GPUs (faiss-gpu). Vectors are added in chunks, so the caller can stream them from a memory map.

`corpus_index` opens a pool's on-disk corpus matrix for search. An exact search whose vectors exceed
`mine.search_memory_mb` reads the matrix block by block for every batch of queries (`BlockedExactSearch`) and
merges each block's top-k, so its memory is bounded by the budget, not by the corpus; the results are a flat
index's. IVF and HNSW indexes hold every vector in memory; a GPU index holds them in GPU memory.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from embedforge.config.mine import MineConfig

if TYPE_CHECKING:
    import faiss

log = logging.getLogger(__name__)
ADD_CHUNK = 65536
IVF_POINTS_PER_CENTROID = 39  # faiss warns below this many training points per centroid


def gpu_count() -> int:
    import faiss  # imported where it is used: a mining driver needs none of its ~14 MiB while teachers encode

    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def on_gpu(config: MineConfig) -> bool:
    """Whether `build_index` puts the index on the GPUs (faiss has no GPU HNSW)."""
    return config.use_gpu == "auto" and config.index != "hnsw" and gpu_count() > 0


def build_index(vectors: np.ndarray, config: MineConfig) -> faiss.Index:
    """An inner-product index holding `vectors` (row i gets id i); `vectors` may be a memory map."""
    import faiss

    n, dim = vectors.shape
    if n == 0:
        raise ValueError("cannot build an index over an empty corpus")
    if config.index == "exact":
        index: faiss.Index = faiss.IndexFlatIP(dim)
    elif config.index == "hnsw":
        index = faiss.IndexHNSWFlat(dim, config.hnsw_m, faiss.METRIC_INNER_PRODUCT)
    else:
        nlist = max(1, min(config.ivf_nlist, n // IVF_POINTS_PER_CENTROID))
        if nlist < config.ivf_nlist:
            log.warning("ivf_nlist %d is too many for %d vectors; using %d", config.ivf_nlist, n, nlist)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        sample = _training_sample(vectors, nlist * 256)
        index.train(sample)
        index.nprobe = min(config.ivf_nprobe, nlist)
    if on_gpu(config):
        index = faiss.index_cpu_to_all_gpus(index)
    for start in range(0, n, ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[start : start + ADD_CHUNK], dtype=np.float32))
    return index


class BlockedExactSearch:
    """Exact inner-product top-k over an on-disk (n, dim) float32 `.npy` matrix, `block_rows` rows in memory at a
    time. Quacks like a faiss index for `search` (`ntotal`, `search(queries, k)`)."""

    def __init__(self, path: Path, block_rows: int) -> None:
        self.path, self.ntotal, self.block_rows = path, len(np.load(path, mmap_mode="r")), max(1, block_rows)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        import faiss

        heap = faiss.ResultHeap(len(queries), k, keep_max=True)
        for part in chunks(self.ntotal, self.block_rows):
            block = read_rows(self.path, part)
            scores, ids = faiss.knn(queries, block, min(k, len(block)), metric=faiss.METRIC_INNER_PRODUCT)
            heap.add_result(scores, ids + part.start)
        heap.finalize()
        return heap.D, heap.I


SearchIndex: TypeAlias = "faiss.Index | BlockedExactSearch"


def read_rows(path: Path, rows: slice) -> np.ndarray:
    """A copy of `rows` of a `.npy` matrix; the file's pages are unmapped again when this returns."""
    return np.array(np.load(path, mmap_mode="r")[rows], dtype=np.float32)


def corpus_index(path: Path, config: MineConfig) -> SearchIndex:
    """The search structure over the corpus matrix at `path`: block by block when an exact search on the CPU would
    hold more than `config.search_memory_mb` of vectors, else `build_index` (a GPU index holds its vectors in GPU
    memory, not the host's)."""
    vectors = np.load(path, mmap_mode="r")
    n, dim = vectors.shape
    budget_rows = config.search_memory_mb * 2**20 // (dim * 4)
    if config.index == "exact" and n > budget_rows and not on_gpu(config):
        log.info(
            "exact search over %d vectors in blocks of %d (search_memory_mb %d)",
            n,
            budget_rows,
            config.search_memory_mb,
        )
        return BlockedExactSearch(path, budget_rows)
    return build_index(vectors, config)


def _training_sample(vectors: np.ndarray, size: int) -> np.ndarray:
    n = vectors.shape[0]
    if n <= size:
        return np.ascontiguousarray(vectors[:], dtype=np.float32)
    rows = np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def search(index: SearchIndex, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, ids) per query, best first; ids are -1 where the corpus has fewer than k documents."""
    k = min(k, index.ntotal)
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def chunks(n: int, size: int) -> Iterator[slice]:
    for i in range(math.ceil(n / size)):
        yield slice(i * size, min(n, (i + 1) * size))
