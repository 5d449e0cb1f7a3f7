"""Encoders and existing embedding models as backbones: the embedder starts exactly where the model is, trains,
and its exports, evaluation and serving paths encode like sentence-transformers (issue: any backbone)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embedforge.config.model import InstructionConfig, LoraConfig, ModelConfig
from embedforge.model import load_embedder, load_encoder
from embedforge.model.export import export_embedder
from embedforge.model.lora import is_peft
from embedforge.model.persistence import save_embedder

TEXTS = ["how do vaccines work", "The Eiffel Tower is in Paris.", "a", "naïve café, 東京 " * 40]


def test_embedding_model_used_as_it_is_encodes_like_sentence_transformers(minilm_dir):
    from sentence_transformers import SentenceTransformer

    embedder = load_embedder("bundled:all-minilm-l6-v2")
    cfg = embedder.config
    assert (cfg.pooling, cfg.pooled_tokens, cfg.bidirectional, cfg.lora.enabled) == ("mean", "all", True, False)
    assert cfg.instructions.query_template == "" and cfg.max_doc_length == 256
    reference = SentenceTransformer(str(minilm_dir), device="cpu").encode(TEXTS, normalize_embeddings=True)
    assert np.abs(embedder.encode_queries(TEXTS, task="ignored: no instruction") - reference).max() < 1e-5
    assert np.abs(embedder.encode_documents(TEXTS) - reference).max() < 1e-5


def _st_folder(tmp_path, tiny_bert_dir, mode: str, prompts: dict[str, str]):
    """A sentence-transformers folder over tiny-bert's weights with another pooling mode and prompts."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(tiny_bert_dir))
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), mode), Normalize()]
    model = SentenceTransformer(modules=modules, prompts=prompts, device="cpu")
    model.save(str(tmp_path / "st"))
    return tmp_path / "st", SentenceTransformer(str(tmp_path / "st"), device="cpu")


def test_own_pooling_and_prompts_are_read_from_the_folder(tmp_path, tiny_bert_dir):
    folder, reference = _st_folder(tmp_path, tiny_bert_dir, "cls", {"query": "query: ", "document": "passage: "})
    embedder = load_embedder(folder)
    assert embedder.config.pooling == "cls"
    assert (embedder.config.instructions.query_template, embedder.config.instructions.document_prefix) == (
        "query: ",
        "passage: ",
    )
    queries = reference.encode(TEXTS[:3], prompt_name="query", normalize_embeddings=True)
    documents = reference.encode(TEXTS[:3], prompt_name="document", normalize_embeddings=True)
    assert np.abs(embedder.encode_queries(TEXTS[:3]) - queries).max() < 1e-5
    assert np.abs(embedder.encode_documents(TEXTS[:3]) - documents).max() < 1e-5
    # the same keys override what the folder says
    mean = load_embedder(ModelConfig(backbone=str(folder), pooling="mean", instructions=InstructionConfig()))
    assert mean.config.pooling == "mean" and mean.prefixes(1, "query")[0].startswith("Instruct: ")


@pytest.mark.parametrize("lora", [True, False])
def test_encoder_trains_with_lora_or_fully_and_round_trips(tmp_path, tiny_bert_dir, lora):
    config = ModelConfig(
        backbone=str(tiny_bert_dir), instructions=InstructionConfig(query_template=""), lora=LoraConfig(enabled=lora)
    )
    embedder = load_embedder(config)
    before = embedder.encode_documents(TEXTS)
    if lora:
        embedder.enable_lora()
        assert is_peft(embedder.backbone)
        assert any("lora_" in n for n, p in embedder.named_parameters() if p.requires_grad)
    embedder.train()
    optimizer = torch.optim.SGD([p for p in embedder.parameters() if p.requires_grad], lr=0.5)
    queries, documents = embedder(embedder.tokenize(TEXTS, kind="query")), embedder(embedder.tokenize(TEXTS[::-1]))
    loss = torch.nn.functional.cross_entropy(queries @ documents.T / 0.05, torch.arange(len(TEXTS)))
    loss.backward()
    optimizer.step()
    after = embedder.encode_documents(TEXTS)
    assert np.abs(after - before).max() > 1e-4
    saved = load_embedder(save_embedder(embedder, tmp_path / "saved"))
    assert np.abs(saved.encode_documents(TEXTS) - after).max() < 1e-5
    export = export_embedder(embedder, tmp_path / "st", "sentence_transformers")
    manifest = json.loads((export / "embedforge_export.json").read_text())
    assert manifest["kind"] == "standard_modules"  # plain SentenceTransformer(path) loads it
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(export), device="cpu")
    assert np.abs(st.encode(TEXTS, normalize_embeddings=True) - after).max() < 1e-5
    assert np.abs(load_encoder(export).encode_documents(TEXTS) - after).max() < 1e-5


def test_encoder_refuses_what_it_cannot_run(tiny_bert_dir):
    with pytest.raises(ValueError, match="bidirectional: false needs a decoder"):
        load_embedder(ModelConfig(backbone=str(tiny_bert_dir), bidirectional=False))
    with pytest.raises(ValueError, match="'ata' needs a decoder"):
        load_embedder(ModelConfig(backbone=str(tiny_bert_dir), pooling="ata"))
    embedder = load_embedder(tiny_bert_dir)
    with pytest.raises(ValueError, match="padded on the right only"):
        embedder.padding_side = "left"


def test_backbone_folder_without_a_known_model_type_fails_naming_it(tmp_path, tiny_bert_dir):
    from embedforge.model.backbone_spec import read_backbone_spec

    assert read_backbone_spec(tiny_bert_dir).model_type == "bert"
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ValueError, match=r"unsupported backbone architecture 'gpt2'.*llama"):
        read_backbone_spec(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(ValueError, match="names no model_type"):
        read_backbone_spec(tmp_path)
