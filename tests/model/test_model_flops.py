"""The FLOP count behind every MFU number (`model/flops.py`), against values computed by hand."""

from __future__ import annotations

import json

import pytest

from embedforge.model.flops import EmbedderFlops, TransformerShape, datasheet_bf16_flops, mfu
from embedforge.paths import REPO_ROOT

SHAPES = REPO_ROOT / "benchmarks" / "gpu_bench" / "shapes"


def test_mistral_7b_forward_flops_per_token():
    shape = TransformerShape.of(json.loads((SHAPES / "mistral-7b-v0.1.json").read_text()))
    assert (shape.heads, shape.kv_heads, shape.head_dim, shape.gated) == (32, 8, 128, True)
    # per block: q and o 4096 x 4096, k and v 4096 x 1024, gate / up / down 4096 x 14336
    per_block = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336
    assert per_block == 218_103_808  # 6.98B non-embedding parameters over 32 blocks
    assert shape.linear_flops_per_token() == 2 * 32 * per_block == 13_958_643_712
    # LoRA r16 on the 7 projections: 2 x 16 x (in + out) each
    assert shape.lora_flops_per_token(16) == 32 * 2 * 16 * (2 * 8192 + 2 * 5120 + 3 * 18432) == 83_886_080
    # attention over one 512-token text: 4 x 512^2 x (32 x 128) per block
    assert shape.attention_flops([512]) == 4 * 512 * 512 * 4096 * 32 == 137_438_953_472
    assert shape.attention_flops([512], causal=True) == 68_719_476_736


def test_bert_shapes_have_two_mlp_projections():
    shape = TransformerShape.of(json.loads((SHAPES / "all-minilm-l6-v2.json").read_text()))
    assert not shape.gated and shape.head_dim == 32
    assert shape.linear_flops_per_token() == 6 * 2 * (4 * 384 * 384 + 2 * 384 * 1536) == 21_233_664


def test_embedder_forward_and_train_step_by_hand():
    """A 1-block toy: hidden 4, 2 heads of 2, intermediate 8, gated; LoRA rank 1; 2 latents, MLP width 4."""
    shape = TransformerShape(hidden=4, layers=1, heads=2, kv_heads=1, head_dim=2, intermediate=8, gated=True)
    linear = 2 * (4 * 4 + 4 * 2 + 4 * 2 + 4 * 4 + 4 * 8 + 4 * 8 + 8 * 4)  # 288 per token
    lora = 2 * 1 * ((4 + 4) + (4 + 2) * 2 + (4 + 4) + (4 + 8) * 2 + (8 + 4))  # 128 per token
    pooling = 4 * 2 * 4 + 2 * (2 * 4 * 4)  # cross-attention 32 + MLP 64
    flops = EmbedderFlops(shape, lora_rank=1, latents=2, pooling_mlp=4)
    lengths = [3, 5]
    attention = 4 * (9 + 25) * 2 * 2  # 544
    assert flops.forward(lengths) == 8 * (linear + lora + pooling) + attention
    # frozen base: forward + activation gradients; adapters and pooling head: + weight gradients; attention x 3
    assert flops.train_step(lengths) == 8 * (2 * linear + 3 * (lora + pooling)) + 3 * attention


def test_mfu_and_datasheet_peaks():
    assert mfu(4e14, 2.0, 8e14) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="positive"):
        mfu(1.0, 0.0, 1.0)
    assert datasheet_bf16_flops("NVIDIA H200") == pytest.approx(989.4e12)
    assert datasheet_bf16_flops("NVIDIA A100-SXM4-80GB") == pytest.approx(312e12)
    assert datasheet_bf16_flops("Some CPU") is None
