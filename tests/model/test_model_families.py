"""Mistral and Qwen2 backbones (tiny random checkpoints) load and turn bidirectional like Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import MistralConfig, MistralModel, Qwen2Config, Qwen2Model

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder
from embedforge.model.backbone import load_tokenizer

SIZES = dict(
    vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=256,
)  # fmt: skip


@pytest.mark.parametrize(
    ("config_cls", "model_cls", "extra"),
    [
        (MistralConfig, MistralModel, {"sliding_window": 4}),  # window shorter than the text: sliding mask path
        (Qwen2Config, Qwen2Model, {}),
    ],
)
def test_family_is_bidirectional_and_pads_consistently(tmp_path, tiny_model_dir, config_cls, model_cls, extra):
    torch.manual_seed(0)
    model_cls(config_cls(**SIZES, **extra)).save_pretrained(tmp_path)
    load_tokenizer(tiny_model_dir).save_pretrained(tmp_path)
    texts = ["one two three four five six", "one two three four five seven", "short"]
    states = {}
    for bidirectional in (True, False):
        embedder = load_embedder(ModelConfig(backbone=str(tmp_path), bidirectional=bidirectional))
        batch = embedder.tokenize(texts[:2], kind="document")
        with torch.no_grad():
            out = embedder.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        states[bidirectional] = out.last_hidden_state[:, 0]
    assert torch.allclose(states[False][0], states[False][1])
    assert not torch.allclose(states[True][0], states[True][1], atol=1e-5)
    embedder = load_embedder(ModelConfig(backbone=str(tmp_path)))
    embedder.padding_side = "left"
    batched = embedder.encode_documents(texts, batch_size=3)
    for i, text in enumerate(texts):
        assert float(batched[i] @ embedder.encode_documents([text])[0]) > 0.99999
