"""Decoders on their real tokens only (`model/packed.py`): the same states, embeddings and gradients as the padded
forward, for every supported family, both attention directions and both padding sides. These run the per-text
reference attention on the CPU; tests/model/test_model_gpu.py checks the CUDA varlen kernel against it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaModel, MistralConfig, MistralModel, Qwen2Config, Qwen2Model

from embedforge.config.model import POOLING_HEADS, ModelConfig
from embedforge.model import load_embedder
from embedforge.model.bidirectional import set_attention_direction
from embedforge.model.packed import pack, packed_last_hidden_state, unpack, varlen_attention

FAMILIES = {
    "llama": (LlamaModel, LlamaConfig),
    "mistral": (MistralModel, MistralConfig),
    "qwen2": (Qwen2Model, Qwen2Config),
}
TEXTS = ["a b c", "a much longer text that needs padding on every other text of the batch", "mid length text"]


def tiny_decoder(family: str, bidirectional: bool) -> torch.nn.Module:
    model_cls, config_cls = FAMILIES[family]
    config = config_cls(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=100, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    return set_attention_direction(model_cls(config).eval(), bidirectional)


def padded_inputs(left: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    lengths = [5, 9, 2]
    ids = torch.randint(0, 100, (3, 9))
    mask = torch.zeros(3, 9, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, slice(9 - n, 9) if left else slice(0, n)] = 1
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    return ids, mask, positions


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("left", [False, True])
def test_packed_states_equal_the_padded_forward(family, bidirectional, left):
    model = tiny_decoder(family, bidirectional)
    ids, mask, positions = padded_inputs(left)
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
        packed = packed_last_hidden_state(model, ids, mask, positions)
    real = mask.bool()
    assert torch.allclose(packed[real], padded[real], atol=1e-5)
    assert not packed[~real].any()  # zeros at padding
    assert model.config._attn_implementation == "sdpa"  # switched back after the call


def test_pack_and_unpack_round_trip():
    ids, mask, positions = padded_inputs(left=True)
    packed = pack(ids, mask, positions)
    assert packed.cu_seqlens.tolist() == [0, 5, 14, 16] and packed.max_length == 9
    assert packed.input_ids.shape == (1, 16) and packed.position_ids[0, :5].tolist() == [0, 1, 2, 3, 4]
    states = torch.arange(16.0).view(1, 16, 1).expand(1, 16, 2)
    padded = unpack(states, packed, 3, 9)
    assert padded[0, 4:, 0].tolist() == [0, 1, 2, 3, 4] and not padded[0, :4].any()


@pytest.mark.parametrize("causal", [False, True])
def test_varlen_attention_equals_a_block_diagonal_mask(causal):
    torch.manual_seed(1)
    lengths = [3, 6, 1]
    total = sum(lengths)
    q, k, v = torch.randn(total, 4, 8), torch.randn(total, 2, 8), torch.randn(total, 2, 8)
    cu = torch.tensor([0, 3, 9, 10], dtype=torch.int32)
    got = varlen_attention(q, k, v, cu, max(lengths), causal)
    text = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths))
    allowed = text[:, None] == text[None, :]
    if causal:
        allowed &= torch.ones(total, total, dtype=torch.bool).tril()
    dense = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.repeat_interleave(2, 1).transpose(0, 1), v.repeat_interleave(2, 1).transpose(0, 1),
        attn_mask=allowed,
    ).transpose(0, 1)  # fmt: skip
    assert torch.allclose(got, dense, atol=1e-6)
    with pytest.raises(ValueError, match="cannot share"):
        varlen_attention(q, torch.randn(total, 3, 8), torch.randn(total, 3, 8), cu, 6, causal)


@pytest.mark.parametrize("pooling", [p for p in POOLING_HEADS if p != "ata"])
def test_embedder_packed_encodings_equal_padded(tiny_model_dir, pooling):
    config = ModelConfig(backbone=str(tiny_model_dir), pooling=pooling)
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config)
    vectors = {}
    for packing in ("never", "always"):
        embedder.packing = packing
        vectors[packing] = embedder.encode_queries(TEXTS, task="Find it", batch_size=3)
    assert float((vectors["never"] * vectors["always"]).sum(axis=1).min()) > 0.99999


def test_packing_stays_off_on_a_cpu_and_for_attention_reading_poolings(tiny_model_dir):
    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir)))
    assert embedder.packing == "auto" and not embedder._runs_packed(embedder.backbone)  # a CPU: the padded forward
    ata = load_embedder(ModelConfig(backbone=str(tiny_model_dir), pooling="ata"))
    ata.packing = "always"
    assert not ata._runs_packed(ata.backbone)


def test_packed_lora_gradients_equal_padded(tiny_model_dir):
    config = ModelConfig(backbone=str(tiny_model_dir), pooling="latent_attention")
    config.lora.dropout = 0.0  # dropout masks are drawn per position, padded or not: compare without them
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config)
    embedder.enable_lora()
    embedder.train()
    batch = embedder.tokenize(TEXTS, task="Find it", kind="query")
    grads = {}
    for packing in ("never", "always"):
        embedder.packing = packing
        embedder.zero_grad()
        emb = embedder(batch)
        (emb @ emb.T).triu(1).sum().backward()
        grads[packing] = {n: p.grad.clone() for n, p in embedder.named_parameters() if p.grad is not None}
    assert grads["never"].keys() == grads["always"].keys() and any("lora_A" in n for n in grads["never"])
    for name, grad in grads["never"].items():
        assert torch.allclose(grads["always"][name], grad, atol=1e-5, rtol=1e-3), name
