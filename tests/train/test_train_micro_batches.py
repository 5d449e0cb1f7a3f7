"""Micro-batched forward passes (train.micro_batch_size) give one big forward's embeddings and gradients."""

from __future__ import annotations

import pytest
import torch

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder
from embedforge.model.lora import add_lora
from embedforge.train.inputs import Encoder, TextInput


def _embedder(tiny_model_dir):
    torch.manual_seed(0)
    config = ModelConfig.model_validate(
        {"backbone": str(tiny_model_dir), "pooling": "mean", "lora": {"enabled": True, "r": 4, "dropout": 0.0}}
    )
    embedder = load_embedder(config)
    embedder.backbone = add_lora(embedder.backbone, config.lora)
    for name, param in embedder.backbone.named_parameters():  # LoRA B starts at zero: give it gradients to compare
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.02)
    embedder.train()
    return embedder


def _inputs() -> tuple[list[TextInput], list[TextInput]]:
    lengths = [3, 11, 1, 7, 5, 2, 9]  # unsorted on purpose: the output must come back in input order
    queries = [TextInput(" ".join(["word"] * n) + f" q{i}", "find it", "query") for i, n in enumerate(lengths)]
    documents = [TextInput(f"doc {i} " + "text " * (n * 2), None, "document") for i, n in enumerate(lengths)]
    return queries, documents


def _step(encoder: Encoder, embedder) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    embedder.zero_grad(set_to_none=True)
    queries, documents = _inputs()
    q, d = encoder(queries), encoder(documents)
    torch.logsumexp(q @ d.T / 0.05, dim=-1).mean().backward()
    grads = {n: p.grad.clone() for n, p in embedder.named_parameters() if p.requires_grad and p.grad is not None}
    return q.detach(), d.detach(), grads


@pytest.mark.parametrize("micro_batch_size", [1, 2, 3])
def test_micro_batches_match_one_forward(tiny_model_dir, micro_batch_size):
    embedder = _embedder(tiny_model_dir)
    q_whole, d_whole, g_whole = _step(Encoder(embedder), embedder)
    chunked = Encoder(embedder, micro_batch_size=micro_batch_size)
    q_micro, d_micro, g_micro = _step(chunked, embedder)
    torch.testing.assert_close(q_micro, q_whole, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(d_micro, d_whole, rtol=1e-4, atol=1e-5)
    assert any("lora" in n for n in g_whole) and g_whole.keys() == g_micro.keys()
    for name, grad in g_whole.items():
        torch.testing.assert_close(g_micro[name], grad, rtol=1e-3, atol=1e-6, msg=name)
    assert chunked.tokens > 0


def test_micro_batch_size_must_be_positive(tiny_model_dir):
    with pytest.raises(ValueError, match="micro_batch_size must be >= 1"):
        Encoder(_embedder(tiny_model_dir), micro_batch_size=0)


def test_gradcache_counts_each_token_once(tiny_model_dir):
    """GradCache's first pass (no gradients) and its second (with) see the same chunks: tokens_per_s counts one."""
    from embedforge.train.gradcache import gradcache_step, plain_step

    embedder = _embedder(tiny_model_dir)
    queries, documents = _inputs()

    def loss_fn(q, d):
        return torch.logsumexp(q @ d.T / 0.05, dim=-1).mean(), {}

    plain, cached = Encoder(embedder), Encoder(embedder)
    plain_step(plain, queries, documents, loss_fn)
    gradcache_step(cached, queries, documents, loss_fn, chunk_size=3)
    assert plain.tokens > 0 and cached.tokens == plain.tokens
