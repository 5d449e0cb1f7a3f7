"""LoRA training path, save/load, merged and sentence-transformers exports, int8 quantization (tiny Llama)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from peft import PeftModel

from embedforge.config.model import LatentAttentionConfig, LoraConfig, ModelConfig
from embedforge.model import load_embedder
from embedforge.model.quantize import cosine_agreement, int8_agreement, quantize_int8

TEXTS = [f"text number {i} about {'cats' if i % 2 else 'the history of rome'} " * (1 + i % 4) for i in range(50)]


@pytest.fixture(scope="module")
def trained(tiny_model_dir):
    """A LoRA embedder with latent-attention pooling whose adapters and head moved away from their init."""
    torch.manual_seed(0)
    config = ModelConfig(
        backbone=str(tiny_model_dir),
        pooling="latent_attention",
        latent_attention=LatentAttentionConfig(num_latents=8, num_heads=2),
        lora=LoraConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]),
        max_query_length=32,
        max_doc_length=32,
    )
    embedder = load_embedder(config)
    embedder.enable_lora()
    with torch.no_grad():
        for name, param in embedder.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return embedder


def test_forward_is_differentiable_into_lora_and_pooling_only(trained):
    batch = trained.tokenize(["a query", "another one"], task="T", kind="query")
    emb = trained(batch)
    assert emb.shape == (2, trained.dimension) and torch.allclose(emb.norm(dim=-1), torch.ones(2))
    emb.sum().backward()
    grads = {n: p.grad for n, p in trained.named_parameters() if p.requires_grad}
    assert any("lora_A" in n and g is not None and g.abs().sum() > 0 for n, g in grads.items())
    assert trained.pooling.latents.grad is not None and trained.pooling.latents.grad.abs().sum() > 0
    assert not any("embed_tokens" in n for n in grads)  # base weights are frozen
    trained.zero_grad()


def test_save_and_load_adapter_folder(trained, tmp_path):
    trained.save(tmp_path / "saved")
    assert (tmp_path / "saved" / "adapter").is_dir() and not (tmp_path / "saved" / "backbone").exists()
    manifest = json.loads((tmp_path / "saved" / "embedforge.json").read_text())
    assert manifest["weights"] == "adapter" and manifest["model"]["pooling"] == "latent_attention"
    loaded = load_embedder(tmp_path / "saved")
    assert isinstance(loaded.backbone, PeftModel)
    a, b = trained.encode_queries(TEXTS[:8], task="T"), loaded.encode_queries(TEXTS[:8], task="T")
    assert np.allclose(a, b, atol=1e-5)


def test_merged_export_loads_without_peft(trained, tmp_path):
    trained.export(tmp_path / "merged", format="merged", card={"training_data": {"wikiqa": 64}})
    loaded = load_embedder(tmp_path / "merged")
    assert not isinstance(loaded.backbone, PeftModel)
    assert isinstance(trained.backbone, PeftModel)  # exporting left the trained model untouched
    cos = (trained.encode_documents(TEXTS[:10]) * loaded.encode_documents(TEXTS[:10])).sum(axis=1)
    assert cos.min() > 0.9999
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "latent_attention (8 latents, 2 heads)" in card and str(trained.backbone_ref) in card
    assert "wikiqa: 64 examples" in card and "Not evaluated yet" in card


def test_sentence_transformers_export_encodes_like_embedforge(trained, tmp_path):
    from sentence_transformers import SentenceTransformer

    trained.export(tmp_path / "st", format="sentence_transformers", card={"evaluation": {"stsb": {"spearman": 0.5}}})
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    ours_q = trained.encode_queries(TEXTS)
    theirs_q = model.encode_query(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert cosine_agreement(ours_q, theirs_q)["min_cosine"] >= 0.999
    ours_d = trained.encode_documents(TEXTS)
    theirs_d = model.encode_document(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert cosine_agreement(ours_d, theirs_d)["min_cosine"] >= 0.999
    custom = model.encode(TEXTS[:5], prompt="Instruct: T\nQuery: ", normalize_embeddings=True)
    assert cosine_agreement(trained.encode_queries(TEXTS[:5], task="T"), custom)["min_cosine"] >= 0.999
    assert "| stsb | spearman | 0.5000 |" in (tmp_path / "st" / "README.md").read_text()


def test_unknown_export_format_is_refused(trained, tmp_path):
    with pytest.raises(ValueError, match="unknown export format 'onnx'"):
        trained.export(tmp_path / "x", format="onnx")


def test_lora_target_modules_are_checked(tiny_model_dir):
    embedder = load_embedder(
        ModelConfig(backbone=str(tiny_model_dir), lora=LoraConfig(target_modules=["q_proj", "query_key_value"]))
    )
    with pytest.raises(ValueError, match=r"\['query_key_value'\] do not exist"):
        embedder.enable_lora()


def test_int8_quantization_agrees_and_leaves_original(trained):
    before = trained.encode_documents(TEXTS[:6])
    report = int8_agreement(trained, TEXTS[:6])
    assert report["texts"] == 6 and 0.9 < report["mean_cosine"] <= 1.0 + 1e-6
    assert np.allclose(before, trained.encode_documents(TEXTS[:6]), atol=1e-6)
    layers = dict(trained.quantize_int8().backbone.named_modules())
    assert type(layers["layers.0.mlp.down_proj"]) is torch.nn.Linear  # outlier-carrying inputs stay float32
    assert repr(layers["layers.0.self_attn.q_proj"]).startswith("DynamicQuantizedLinear")
    with pytest.raises(ValueError, match="no Linear layer left"):
        quantize_int8(trained, skip=("proj",))
