"""Every pooling head on small hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch

from embedforge.config.model import LatentAttentionConfig, ModelConfig
from embedforge.model.pooling import (
    AnchorTokenPooling,
    LastTokenPooling,
    LatentAttentionPooling,
    MeanPooling,
    WeightedMeanPooling,
    build_pooling,
)
from embedforge.model.pooling.ata import anchor_weights

# batch of 2, 3 positions, d = 2; row 0 right-padded (last position pad), row 1 left-padded (first position pad)
HIDDEN = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[100.0, 100.0], [5.0, 6.0], [7.0, 8.0]]])
ATTENTION = torch.tensor([[1, 1, 0], [0, 1, 1]])


def test_mean_skips_padding_and_instruction_tokens():
    pool_mask = torch.tensor([[0, 1, 0], [0, 1, 1]])  # row 0: token 0 is instruction
    out = MeanPooling()(HIDDEN, ATTENTION, pool_mask)
    assert torch.allclose(out, torch.tensor([[3.0, 4.0], [6.0, 7.0]]))


def test_weighted_mean_weights_by_position_from_the_first_real_token():
    # SGPT: weight = 1-based position among real tokens, whatever the padding side; unpooled tokens keep theirs
    out = WeightedMeanPooling()(HIDDEN, ATTENTION, ATTENTION)
    assert torch.allclose(out, torch.tensor([[7 / 3, 10 / 3], [19 / 3, 22 / 3]]))
    instruction_first = WeightedMeanPooling()(HIDDEN, ATTENTION, torch.tensor([[0, 1, 0], [0, 0, 1]]))
    assert torch.allclose(instruction_first, torch.tensor([[3.0, 4.0], [7.0, 8.0]]))
    assert isinstance(build_pooling(ModelConfig(pooling="weighted_mean"), 2), WeightedMeanPooling)


def test_last_reads_last_real_token_for_both_padding_sides():
    out = LastTokenPooling()(HIDDEN, ATTENTION, ATTENTION)
    assert torch.allclose(out, torch.tensor([[3.0, 4.0], [7.0, 8.0]]))


def test_empty_pool_mask_is_a_clear_error():
    with pytest.raises(ValueError, match="selects no token"):
        MeanPooling()(HIDDEN, ATTENTION, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="selects no token"):
        WeightedMeanPooling()(HIDDEN, ATTENTION, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="selects no token"):
        LastTokenPooling()(HIDDEN, ATTENTION, torch.zeros(2, 3, dtype=torch.long))


def test_latent_attention_matches_hand_computation():
    pool = LatentAttentionPooling(hidden_size=2, num_latents=2, num_heads=1)
    with torch.no_grad():
        pool.latents.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        for linear in (pool.mlp[0], pool.mlp[2]):
            linear.weight.copy_(torch.eye(2))
            linear.bias.zero_()
    hidden = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    mask = torch.tensor([[1, 1]])
    # token 1: scores (2/sqrt2, 0) -> softmax p=(e^a/(e^a+1), 1/(e^a+1)), a = sqrt(2); O = p (latents = identity)
    a = 2 / math.sqrt(2)
    p = torch.tensor([math.exp(a), 1.0]) / (math.exp(a) + 1)
    q = torch.tensor([0.5, 0.5])  # token 2: equal scores
    gelu = torch.nn.functional.gelu
    expected = (gelu(p) + gelu(q)) / 2
    assert torch.allclose(pool(hidden, mask, mask)[0], expected, atol=1e-6)


def test_latent_attention_heads_attend_separately():
    pool = LatentAttentionPooling(hidden_size=4, num_latents=3, num_heads=2)
    hidden = torch.randn(1, 2, 4)
    out = pool.cross_attend(hidden)
    head0 = torch.softmax(hidden[0, :, :2] @ pool.latents[:, :2].T / math.sqrt(2), -1) @ pool.latents[:, :2]
    assert torch.allclose(out[0, :, :2], head0, atol=1e-6)


def test_latent_attention_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="num_heads=3 must divide"):
        build_pooling(ModelConfig(pooling="latent_attention", latent_attention=LatentAttentionConfig(num_heads=3)), 64)


def test_ata_weights_match_paper_formula():
    # one head, S = 2 real tokens + 1 padding; attention rows are queries, columns keys
    att = torch.tensor([[[[0.75, 0.25, 0.0], [0.5, 0.5, 0.0], [0.3, 0.3, 0.4]]]])
    mask = torch.tensor([[1, 1, 0]])
    w0 = math.log(0.75 * 2 + 1) + math.log(0.5 * 2 + 1)  # attention token 0 receives from queries 0, 1
    w1 = math.log(0.25 * 2 + 1) + math.log(0.5 * 2 + 1)
    weights = anchor_weights(att, mask, mask)
    assert torch.allclose(weights[0], torch.tensor([w0, w1, 0.0]) / (w0 + w1), atol=1e-6)
    hidden = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])
    out = AnchorTokenPooling()(hidden, mask, mask, att)
    assert torch.allclose(out[0], torch.tensor([w0, w1]) / (w0 + w1), atol=1e-6)


def test_ata_excludes_instruction_tokens_and_needs_attentions():
    att = torch.full((1, 2, 3, 3), 1 / 3)
    mask = torch.tensor([[1, 1, 1]])
    weights = anchor_weights(att, mask, torch.tensor([[0, 1, 1]]))
    assert torch.allclose(weights, torch.tensor([[0.0, 0.5, 0.5]]))
    with pytest.raises(ValueError, match="attention maps"):
        AnchorTokenPooling()(torch.zeros(1, 3, 2), mask, mask, None)
