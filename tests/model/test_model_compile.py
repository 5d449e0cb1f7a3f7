"""Regional compilation (`model/compile.py`): compiled blocks give the eager model's embeddings and gradients,
LoRA dropout included (compiled code draws its masks from torch's generators, as GradCache's replay needs)."""

from __future__ import annotations

import torch

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder
from embedforge.model.backbone import transformer_blocks
from embedforge.model.compile import compile_blocks


def test_compiled_blocks_equal_eager_with_lora_dropout(tiny_model_dir):
    config = ModelConfig(backbone=str(tiny_model_dir), pooling="latent_attention")
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config)
    embedder.enable_lora()  # dropout 0.1 (NV-Embed appendix C)
    embedder.train()
    embedder.packing = "always"  # the GPU path (packed rows, varlen attention), on the CPU's reference attention
    batches = [
        embedder.tokenize(["a b c", "a much longer text that needs padding here", "mid"], task="T", kind="query"),
        embedder.tokenize(["other lengths this time around", "x"], task="T", kind="query"),
    ]

    def step(batch):
        torch.manual_seed(1)
        embedder.zero_grad()
        emb = embedder(batch)
        (emb @ emb.T).triu(1).sum().backward()
        return emb.detach(), torch.cat([p.grad.flatten() for p in embedder.parameters() if p.grad is not None])

    eager = [step(b) for b in batches]
    assert compile_blocks(embedder.backbone) == config_layers(embedder)
    assert compile_blocks(embedder.backbone) == 0  # idempotent
    compiled = [step(b) for b in batches]  # two token counts: one graph for dynamic shapes
    for (e_emb, e_grad), (c_emb, c_grad) in zip(eager, compiled, strict=True):
        assert torch.allclose(c_emb, e_emb, atol=1e-5)
        assert torch.allclose(c_grad, e_grad, atol=1e-5, rtol=1e-4)


def config_layers(embedder) -> int:
    return len(transformer_blocks(embedder.backbone)[1])
