"""faiss indexes over normalised vectors: exact matches brute force; IVF and HNSW recall it closely."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.config.mine import MineConfig
from embedforge.mine.index import build_index, search


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_exact_index_equals_brute_force_inner_product():
    docs, queries = _unit(500, 16, 0), _unit(20, 16, 1)
    scores, ids = search(build_index(docs, MineConfig(index="exact")), queries, 10)
    expected = np.argsort(-(queries @ docs.T), axis=1)[:, :10]
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ docs.T, expected, axis=1), rtol=1e-5)


@pytest.mark.parametrize("kind", ["ivf", "hnsw"])
def test_approximate_indexes_recall_most_of_the_exact_top_k(kind):
    docs, queries = _unit(4000, 16, 2), _unit(50, 16, 3)
    _, exact = search(build_index(docs, MineConfig(index="exact")), queries, 10)
    _, approx = search(build_index(docs, MineConfig(index=kind, ivf_nlist=32, ivf_nprobe=8)), queries, 10)
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall >= 0.8, f"{kind} recall@10 {recall:.2f}"


def test_k_larger_than_the_corpus_and_empty_corpus():
    docs = _unit(3, 8, 4)
    _, ids = search(build_index(docs, MineConfig()), docs[:1], 10)
    assert ids.shape == (1, 3) and ids[0, 0] == 0
    with pytest.raises(ValueError, match="empty corpus"):
        build_index(np.zeros((0, 8), dtype=np.float32), MineConfig())
