"""faiss inner-product index over L2-normalised teacher embeddings (recipe section 5).

`exact` is a flat inner-product index (exact top-k); `ivf` (IVF-Flat, trained on a sample) and `hnsw` trade a
little recall for speed on large corpora. With a visible GPU and `use_gpu: auto` exact and IVF indexes move to
the GPUs (faiss-gpu). Vectors are added in chunks, so the caller can stream them from a memory map.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

import faiss
import numpy as np

from embedforge.config.mine import MineConfig

log = logging.getLogger(__name__)
ADD_CHUNK = 65536
IVF_POINTS_PER_CENTROID = 39  # faiss warns below this many training points per centroid


def gpu_count() -> int:
    return faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0


def build_index(vectors: np.ndarray, config: MineConfig) -> faiss.Index:
    """An inner-product index holding `vectors` (row i gets id i); `vectors` may be a memory map."""
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
    if config.use_gpu == "auto" and config.index != "hnsw" and gpu_count() > 0:  # faiss has no GPU HNSW
        index = faiss.index_cpu_to_all_gpus(index)
    for start in range(0, n, ADD_CHUNK):
        index.add(np.ascontiguousarray(vectors[start : start + ADD_CHUNK], dtype=np.float32))
    return index


def _training_sample(vectors: np.ndarray, size: int) -> np.ndarray:
    n = vectors.shape[0]
    if n <= size:
        return np.ascontiguousarray(vectors[:], dtype=np.float32)
    rows = np.sort(np.random.default_rng(0).choice(n, size=size, replace=False))
    return np.ascontiguousarray(vectors[rows], dtype=np.float32)


def search(index: faiss.Index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k (scores, ids) per query, best first; ids are -1 where the corpus has fewer than k documents."""
    k = min(k, index.ntotal)
    return index.search(np.ascontiguousarray(queries, dtype=np.float32), k)


def chunks(n: int, size: int) -> Iterator[slice]:
    for i in range(math.ceil(n / size)):
        yield slice(i * size, min(n, (i + 1) * size))
