"""`load_embedder` / `load_encoder` for every kind of reference, with clear errors for the rest."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embedforge import load_embedder as public_load_embedder
from embedforge.config.model import ModelConfig
from embedforge.model import Embedder, TextEncoder, load_embedder, load_encoder
from embedforge.model.export import export_embedder
from embedforge.model.persistence import save_embedder
from embedforge.model.st_encoder import SentenceTransformerEncoder


def test_load_from_config_file_and_bundled_ref(tiny_model_dir):
    from_yaml = public_load_embedder(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")
    assert isinstance(from_yaml, Embedder) and isinstance(from_yaml, TextEncoder)
    assert from_yaml.config.max_query_length == 32 and from_yaml.dimension == 64
    bundled = load_embedder("bundled:tiny-llama", model_config=ModelConfig(pooling="last"))
    assert bundled.config.backbone == "bundled:tiny-llama" and bundled.config.pooling == "last"
    texts = ["one", "two words"]
    assert np.allclose(from_yaml.encode_documents(texts), load_embedder(tiny_model_dir).encode_documents(texts))


def test_plain_backbone_save_roundtrip(tmp_path, tiny_model_dir):
    embedder = load_embedder(tiny_model_dir)
    save_embedder(embedder, tmp_path / "plain")
    assert (tmp_path / "plain" / "backbone" / "config.json").is_file()
    reloaded = load_embedder(tmp_path / "plain")
    assert np.allclose(embedder.encode_queries(["q"]), reloaded.encode_queries(["q"]), atol=1e-6)


def test_sentence_transformers_folder_is_a_text_encoder(minilm_dir):
    from sentence_transformers import SentenceTransformer

    encoder = load_encoder("bundled:all-minilm-l6-v2")
    assert isinstance(encoder, SentenceTransformerEncoder) and isinstance(encoder, TextEncoder)
    assert encoder.dimension == 384
    texts = ["a cat sat on the mat", "stock markets fell"]
    ours = encoder.encode_queries(texts, task="ignored for models trained without instructions")
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts, normalize_embeddings=True)
    assert ours.dtype == np.float32 and np.allclose(ours, reference, atol=1e-5)
    assert np.allclose(np.linalg.norm(encoder.encode_documents(texts), axis=1), 1.0, atol=1e-5)


def test_exported_sentence_transformers_folder_loads_both_ways(tmp_path, tiny_model_dir):
    embedder = load_embedder(tiny_model_dir)
    export_embedder(embedder, tmp_path / "st", "sentence_transformers")
    encoder = load_encoder(tmp_path / "st")
    assert isinstance(encoder, SentenceTransformerEncoder)
    texts = ["what is rome", "cats"]
    assert np.allclose(encoder.encode_queries(texts, task="T"), embedder.encode_queries(texts, task="T"), atol=1e-5)
    assert np.allclose(encoder.encode_documents(texts), embedder.encode_documents(texts), atol=1e-5)
    inner = load_embedder(tmp_path / "st")
    assert np.allclose(inner.encode_documents(texts), embedder.encode_documents(texts), atol=1e-5)


def test_int8_inference_from_config(tiny_model_dir):
    encoder = load_encoder(tiny_model_dir, model_config=ModelConfig(int8_inference=True))
    assert "int8" in encoder.name
    assert "DynamicQuantizedLinear" in repr(encoder.backbone)


def test_bad_references_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_embedder(tmp_path / "missing")
    with pytest.raises(ValueError, match="unknown bundled model"):
        load_embedder("bundled:nope")
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ValueError, match="is a file but not a config"):
        load_embedder(tmp_path / "weights.bin")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="neither an embedforge model folder nor a Hugging Face checkpoint"):
        load_embedder(tmp_path / "empty")
    with pytest.raises(TypeError, match="got int"):
        load_embedder(3)
