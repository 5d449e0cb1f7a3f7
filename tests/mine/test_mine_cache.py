"""The shared embedding cache: keyed by (model, pooling, prefix, side, text), sharded, resumable."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.embeddings.cache import KEY_BYTES, EmbeddingCache, encoder_identity, pull_published, text_key


def _vectors(n: int, dim: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def test_put_then_get_in_any_order_and_across_shards(tmp_path):
    cache = EmbeddingCache(tmp_path, encoder_identity("m", "mean", "query: ", "query"))
    a, b = _vectors(3, seed=1), _vectors(2, seed=2)
    cache.put(["x", "y", "z"], a)
    cache.put(["u", "v"], b)
    got = cache.get(["v", "x", "z", "u"])
    np.testing.assert_array_equal(got, np.stack([b[1], a[0], a[2], b[0]]))
    assert cache.missing(["x", "new", "u", "other"]) == [1, 3]
    assert len(cache) == 5


def test_a_new_cache_object_sees_shards_written_before(tmp_path):
    identity = encoder_identity("m", "mean", "", "document")
    EmbeddingCache(tmp_path, identity).put(["a", "b"], _vectors(2))
    reopened = EmbeddingCache(tmp_path, identity)
    assert reopened.missing(["a", "b", "c"]) == [2]
    np.testing.assert_array_equal(reopened.get(["b"]), _vectors(2)[1:])


def test_every_part_of_the_identity_separates_entries(tmp_path):
    base = {"model": "m", "pooling": "mean", "prefix": "", "side": "query"}
    EmbeddingCache(tmp_path, encoder_identity(**base)).put(["t"], _vectors(1))
    for change in ({"model": "m2"}, {"pooling": "last"}, {"prefix": "query: "}, {"side": "document"}):
        assert EmbeddingCache(tmp_path, encoder_identity(**{**base, **change})).missing(["t"]) == [0], change


def test_keys_ending_in_nul_bytes_are_found(tmp_path):
    """numpy's fixed-width bytes drop trailing NULs; about 1 key in 256 ends in one."""
    identity = encoder_identity("m")
    texts = [f"text {i}" for i in range(3000)]
    assert any(text_key(identity, t)[-1] == 0 for t in texts)
    cache = EmbeddingCache(tmp_path, identity)
    cache.put(texts, _vectors(len(texts)))
    assert EmbeddingCache(tmp_path, identity).missing(texts) == []
    assert len(text_key(identity, "x")) == KEY_BYTES


def test_rewriting_the_same_batch_adds_no_shard_and_missing_texts_are_named(tmp_path):
    cache = EmbeddingCache(tmp_path, encoder_identity("m"))
    cache.put(["a", "b"], _vectors(2))
    cache.put(["a", "b"], _vectors(2))
    assert len(list(cache.dir.glob("*.keys.npy"))) == 1
    with pytest.raises(KeyError, match=r"1 of 2 texts are not in the cache .* 'zzz'"):
        cache.get(["a", "zzz"])
    with pytest.raises(ValueError, match="2 texts but 1 vectors"):
        cache.put(["c", "d"], _vectors(1))


def test_published_shards_reach_another_nodes_cache_and_half_published_ones_wait(s3_bucket, tmp_path):
    from embedforge.runs.store import RunStore

    uri = f"{s3_bucket}/run/embeddings"
    writer = EmbeddingCache(tmp_path / "node-a", "minilm|document")
    first = writer.put(["alpha", "beta"], np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.publish(first, uri)
    second = writer.put(["gamma"], np.full((1, 3), 7.0, dtype=np.float32))
    # a shard whose vectors arrived but whose keys did not yet: still being published, so not pulled
    RunStore(uri).put(writer.dir / f"{second}.vecs.npy", f"{writer.dir.name}/{second}.vecs.npy")

    assert pull_published(uri, tmp_path / "node-b") == 3  # identity, vectors and keys of the complete shard
    reader = EmbeddingCache(tmp_path / "node-b", "minilm|document")
    np.testing.assert_array_equal(reader.get(["beta", "alpha"]), [[3, 4, 5], [0, 1, 2]])
    assert reader.missing(["gamma"]) == [0]

    writer.publish(second, uri)
    pull_published(uri, tmp_path / "node-b")
    np.testing.assert_array_equal(reader.get(["gamma"]), [[7, 7, 7]])
