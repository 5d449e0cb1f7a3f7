"""LoRA training path, save/load, merged and sentence-transformers exports, int8 quantization (tiny Llama)."""

from __future__ import annotations

import json
import logging
import re

import numpy as np
import pytest
import torch
from peft import PeftModel

from embedforge.config.model import LatentAttentionConfig, LoraConfig, ModelConfig
from embedforge.model import load_embedder, load_encoder
from embedforge.model.export import export_embedder
from embedforge.model.persistence import save_embedder
from embedforge.model.quantize import cosine_agreement, int8_agreement, quantize_int8

TEXTS = [f"text number {i} about {'cats' if i % 2 else 'the history of rome'} " * (1 + i % 4) for i in range(50)]


def _lora_embedder(tiny_model_dir, **model: object):
    """A tiny LoRA embedder whose adapters moved away from their init (so a merge or export that drops them shows)."""
    torch.manual_seed(0)
    config = ModelConfig(
        backbone=str(tiny_model_dir),
        lora=LoraConfig(r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"]),
        max_query_length=32,
        **model,
    )
    embedder = load_embedder(config)
    embedder.enable_lora()
    with torch.no_grad():
        for name, param in embedder.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    return embedder


@pytest.fixture(scope="module")
def trained(tiny_model_dir):
    """A LoRA embedder with latent-attention pooling whose adapters and head moved away from their init."""
    return _lora_embedder(
        tiny_model_dir,
        pooling="latent_attention",
        latent_attention=LatentAttentionConfig(num_latents=8, num_heads=2),
        max_doc_length=32,
    )


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
    save_embedder(trained, tmp_path / "saved")
    assert (tmp_path / "saved" / "adapter").is_dir() and not (tmp_path / "saved" / "backbone").exists()
    manifest = json.loads((tmp_path / "saved" / "embedforge.json").read_text())
    assert manifest["weights"] == "adapter" and manifest["model"]["pooling"] == "latent_attention"
    loaded = load_embedder(tmp_path / "saved")
    assert isinstance(loaded.backbone, PeftModel)
    a, b = trained.encode_queries(TEXTS[:8], task="T"), loaded.encode_queries(TEXTS[:8], task="T")
    assert np.allclose(a, b, atol=1e-5)


def test_load_encoder_merges_adapters_and_encodes_the_same(trained, tmp_path):
    save_embedder(trained, tmp_path / "saved")
    encoder = load_encoder(tmp_path / "saved")
    assert not isinstance(encoder.backbone, PeftModel)  # one matmul per projection when serving / evaluating
    a, b = trained.encode_documents(TEXTS[:8]), encoder.encode_documents(TEXTS[:8])
    assert np.allclose(a, b, atol=1e-5)


def test_merged_export_loads_without_peft(trained, tmp_path):
    export_embedder(trained, tmp_path / "merged", "merged", card={"training_data": {"wikiqa": 64}})
    loaded = load_embedder(tmp_path / "merged")
    assert not isinstance(loaded.backbone, PeftModel)
    assert isinstance(trained.backbone, PeftModel)  # exporting left the trained model untouched
    cos = (trained.encode_documents(TEXTS[:10]) * loaded.encode_documents(TEXTS[:10])).sum(axis=1)
    assert cos.min() > 0.9999
    card = (tmp_path / "merged" / "README.md").read_text()
    assert "latent_attention (8 latents, 2 heads)" in card and str(trained.backbone_ref) in card
    assert "wikiqa: 64 examples" in card and "Not evaluated yet" in card


def _agree(ours: np.ndarray, theirs: np.ndarray) -> bool:
    return float(np.abs(ours - theirs).max()) < 1e-4 or cosine_agreement(ours, theirs)["min_cosine"] > 0.999


def _export_manifest(directory) -> dict:
    return json.loads((directory / "embedforge_export.json").read_text())


def test_custom_module_export_encodes_like_embedforge_and_says_why(trained, tmp_path, caplog):
    from sentence_transformers import SentenceTransformer

    with caplog.at_level(logging.WARNING, logger="embedforge.model.export"):
        export_embedder(
            trained, tmp_path / "st", "sentence_transformers", card={"evaluation": {"stsb": {"spearman": 0.5}}}
        )
    manifest = _export_manifest(tmp_path / "st")
    assert manifest["kind"] == "custom_module" and manifest["trust_remote_code"] is True
    assert manifest["custom_module_reason"].startswith("bidirectional attention")  # (latent attention too)
    assert "trust_remote_code=True" in caplog.text and "bidirectional attention" in caplog.text
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        SentenceTransformer(str(tmp_path / "st"), device="cpu")
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu", trust_remote_code=True)
    ours_q = trained.encode_queries(TEXTS)
    theirs_q = model.encode_query(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert cosine_agreement(ours_q, theirs_q)["min_cosine"] >= 0.999
    ours_d = trained.encode_documents(TEXTS)
    theirs_d = model.encode_document(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert cosine_agreement(ours_d, theirs_d)["min_cosine"] >= 0.999
    custom = model.encode(TEXTS[:5], prompt="Instruct: T\nQuery: ", normalize_embeddings=True)
    assert cosine_agreement(trained.encode_queries(TEXTS[:5], task="T"), custom)["min_cosine"] >= 0.999
    card = (tmp_path / "st" / "README.md").read_text()
    assert "| stsb | spearman | 0.5000 |" in card
    assert "trust_remote_code=True" in card and "because of bidirectional attention" in card


def _causal_lora_embedder(tiny_model_dir, pooling: str):
    # the longest TEXTS are cut at 24 document tokens: both sides must truncate alike
    return _lora_embedder(tiny_model_dir, pooling=pooling, bidirectional=False, max_doc_length=24)


@pytest.mark.parametrize("pooling", ["mean", "weighted_mean", "last"])
def test_standard_modules_export_loads_without_remote_code(tiny_model_dir, tmp_path, pooling):
    from sentence_transformers import SentenceTransformer

    embedder = _causal_lora_embedder(tiny_model_dir, pooling)
    export_embedder(embedder, tmp_path / "st", "sentence_transformers")
    manifest = _export_manifest(tmp_path / "st")
    assert manifest["kind"] == "standard_modules" and manifest["custom_module_reason"] is None
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert all(m["type"].startswith("sentence_transformers.") for m in modules)
    assert not (tmp_path / "st" / "embedforge").exists() and not list((tmp_path / "st").glob(".st-*"))
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu")  # plain: no trust_remote_code
    assert model.tokenizer.padding_side == "right" and model.max_seq_length == 32
    texts = [*TEXTS[:12], "", " leading space", "naïve café, 東京", "faq\nQuery: how to pay"]  # template tail inside
    ours_q, theirs_q = embedder.encode_queries(texts), model.encode_query(texts, convert_to_numpy=True)
    assert _agree(ours_q, theirs_q)
    ours_d, theirs_d = embedder.encode_documents(texts), model.encode_document(texts, convert_to_numpy=True)
    assert _agree(ours_d, theirs_d)
    custom = model.encode_query(texts[:5], prompt="Instruct: T\nQuery: ", convert_to_numpy=True)
    assert _agree(embedder.encode_queries(texts[:5], task="T"), custom)
    assert np.allclose(np.linalg.norm(theirs_d, axis=1)[:12], 1.0, atol=1e-5)  # Normalize module (config.normalize)
    encoder = load_encoder(tmp_path / "st")  # the TextEncoder wrapper: instructions and per-kind lengths too
    assert _agree(embedder.encode_queries(texts, task="T"), encoder.encode_queries(texts, task="T"))
    assert _agree(ours_d, encoder.encode_documents(texts))
    card = (tmp_path / "st" / "README.md").read_text()
    assert "model = SentenceTransformer(PATH)\n" in card and "trust_remote_code" not in card


@pytest.mark.parametrize("pooling", ["mean", "weighted_mean", "last"])
def test_bos_tokenizer_blocks_standard_mean_pooling_only(tiny_model_dir, tmp_path, pooling):
    from sentence_transformers import SentenceTransformer
    from tokenizers import processors

    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir), pooling=pooling, bidirectional=False))
    bos = embedder.tokenizer.bos_token
    embedder.tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, embedder.tokenizer.bos_token_id)]
    )  # a Llama-style tokenizer: BOS first, which embedforge attends to but never pools
    export_embedder(embedder, tmp_path / "st", "sentence_transformers")
    manifest = _export_manifest(tmp_path / "st")
    if pooling != "last":
        assert manifest["kind"] == "custom_module" and "leading BOS" in manifest["custom_module_reason"]
        return
    assert manifest["kind"] == "standard_modules"
    model = SentenceTransformer(str(tmp_path / "st"), device="cpu")
    assert _agree(embedder.encode_queries(TEXTS[:6]), model.encode_query(TEXTS[:6], convert_to_numpy=True))
    assert _agree(embedder.encode_documents(TEXTS[:6]), model.encode_document(TEXTS[:6], convert_to_numpy=True))


def test_unknown_export_format_is_refused(trained, tmp_path):
    with pytest.raises(ValueError, match="unknown export format 'onnx'"):
        export_embedder(trained, tmp_path / "x", "onnx")


def test_lora_target_modules_are_checked(tiny_model_dir):
    embedder = load_embedder(
        ModelConfig(backbone=str(tiny_model_dir), lora=LoraConfig(target_modules=["q_proj", "query_key_value"]))
    )
    with pytest.raises(ValueError, match=r"\[.query_key_value.\] are not linear layers"):
        embedder.enable_lora()


@pytest.mark.parametrize("backbone", ["tiny_model_dir", "tiny_bert_dir"])
def test_lora_top_layers_adapts_only_the_last_blocks(request, backbone):
    """Llama holds its blocks in `layers`, BERT in `encoder.layer`: either way only the last block gets adapters."""
    embedder = load_embedder(
        ModelConfig(backbone=str(request.getfixturevalue(backbone)), lora=LoraConfig(dropout=0.0, top_layers=1))
    )
    embedder.enable_lora()
    blocks = {int(re.search(r"layers?\.(\d+)\.", n).group(1)) for n, _ in embedder.named_parameters() if "lora_A" in n}
    assert blocks == {embedder.backbone.config.num_hidden_layers - 1}
    assert "top_layers" not in ModelConfig(backbone="x").model_dump()["lora"]  # unset: the stage hash is unchanged
    assert (
        ModelConfig(backbone="x", lora=LoraConfig(top_layers=1)).model_dump()["lora"]["top_layers"] == 1
    )  # set: hashed


def test_lora_top_layers_beyond_the_backbone_is_refused(tiny_model_dir):
    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir), lora=LoraConfig(top_layers=3)))
    with pytest.raises(ValueError, match="top_layers 3 exceeds the backbone's 2 transformer blocks"):
        embedder.enable_lora()


def test_int8_quantization_agrees_and_leaves_original(trained):
    before = trained.encode_documents(TEXTS[:6])
    report = int8_agreement(trained, TEXTS[:6])
    assert report["texts"] == 6 and 0.9 < report["mean_cosine"] <= 1.0 + 1e-6
    assert np.allclose(before, trained.encode_documents(TEXTS[:6]), atol=1e-6)
    layers = dict(quantize_int8(trained).backbone.named_modules())
    assert type(layers["layers.0.mlp.down_proj"]) is torch.nn.Linear  # outlier-carrying inputs stay float32
    assert repr(layers["layers.0.self_attn.q_proj"]).startswith("DynamicQuantizedLinear")
    with pytest.raises(ValueError, match="no Linear layer left"):
        quantize_int8(trained, skip=("proj",))


def test_every_format_from_one_merge_shares_the_weights_on_disk(tiny_model_dir, tmp_path):
    """Training's exports: the adapters folded in place once, the custom-module folder hard-linked to the merged
    export's files, and both still encode like the trained model."""
    from sentence_transformers import SentenceTransformer

    from embedforge.model.export import export_every_format
    from embedforge.model.formats import EXPORT_FORMATS

    embedder = _lora_embedder(
        tiny_model_dir,
        pooling="latent_attention",
        latent_attention=LatentAttentionConfig(num_latents=8, num_heads=2),
        max_doc_length=32,
    )
    before = embedder.encode_documents(TEXTS[:10])
    paths = export_every_format(embedder, tmp_path / "export", card={"training_data": {"wikiqa": 64}})
    assert set(paths) == set(EXPORT_FORMATS)
    assert not isinstance(embedder.backbone, PeftModel)  # merged in place, no copy
    assert cosine_agreement(before, embedder.encode_documents(TEXTS[:10]))["min_cosine"] > 0.9999
    merged, st = paths["merged"], paths["sentence_transformers"]
    weights = [*sorted((merged / "backbone").glob("*.safetensors")), merged / "pooling.safetensors"]
    assert len(weights) >= 2
    for path in weights:
        twin = st / "embedforge" / path.relative_to(merged)
        assert twin.stat().st_ino == path.stat().st_ino and path.stat().st_nlink == 2
    assert "trust_remote_code=True" in (st / "README.md").read_text()  # each export keeps its own card
    assert "trust_remote_code" not in (merged / "README.md").read_text()
    assert not (st / "embedforge" / "README.md").exists()
    loaded = load_embedder(merged)
    assert cosine_agreement(before, loaded.encode_documents(TEXTS[:10]))["min_cosine"] > 0.9999
    model = SentenceTransformer(str(st), device="cpu", trust_remote_code=True)
    theirs = model.encode_document(TEXTS[:10], convert_to_numpy=True, normalize_embeddings=True)
    assert cosine_agreement(before, theirs)["min_cosine"] > 0.9999


def test_linking_falls_back_to_copies_across_file_systems(tmp_path, monkeypatch):
    import errno
    import os

    from embedforge.model.export import link_tree

    source = tmp_path / "a"
    (source / "backbone").mkdir(parents=True)
    (source / "backbone" / "w.safetensors").write_bytes(b"x" * 100)
    (source / "README.md").write_text("card")

    def cross_device(src, dst):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    assert link_tree(source, tmp_path / "b", skip=frozenset({"README.md"})) == 100
    copied, original = tmp_path / "b" / "backbone" / "w.safetensors", source / "backbone" / "w.safetensors"
    assert copied.read_bytes() == b"x" * 100 and copied.stat().st_ino != original.stat().st_ino
    assert not (tmp_path / "b" / "README.md").exists()
