"""GradCache gives the plain loss's gradients on a tiny Llama with LoRA dropout (RNG replayed per chunk)."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, get_peft_model

from embedforge.config.train import LossesConfig
from embedforge.model.backbone import load_backbone, load_tokenizer
from embedforge.model.batching import budget_batches
from embedforge.model.pooling.base import masked_mean
from embedforge.model.tokenization import tokenize_pairs
from embedforge.train.gradcache import gradcache_step, plain_step
from embedforge.train.objective import Targets, objective

B, C = 4, 3


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")),
]


def word_counts(texts):
    return [len(t.split()) for t in texts]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sorted_chunks", [False, True])
def test_gradcache_gradients_equal_plain_loss(tiny_model_dir, device, sorted_chunks):
    """On a GPU, dropout draws from the CUDA generator: GradCache must replay that one too. With token lengths,
    chunks go longest first within a token budget and the loss still sees the batch's order."""
    torch.manual_seed(0)
    tokenizer = load_tokenizer(tiny_model_dir)
    model = load_backbone(tiny_model_dir)
    model = get_peft_model(
        model,
        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.3, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    ).to(device)
    model.train()

    def encode(texts):
        enc = tokenize_pairs(tokenizer, [""] * len(texts), list(texts), max_length=32).to(device)
        out = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask).last_hidden_state
        return torch.nn.functional.normalize(masked_mean(out, enc.pool_mask), dim=-1)

    queries = [f"question number {i} about topic {i * 7}" + " more" * (i % 3) for i in range(B)]
    docs = [f"passage {i} {j} with some words {i + j}" + " and" * ((i * j) % 4) for i in range(B) for j in range(C)]
    losses = LossesConfig.model_validate({"pair_bce": {"weight": 0.5}})
    nan = float("nan")
    targets = Targets(
        torch.full((B, C), nan, device=device), torch.full((B,), nan, device=device), torch.ones(B, device=device)
    )

    def loss_fn(q, d):
        return objective(q, d.reshape(B, C, -1), targets, losses, in_batch=True)

    def grads():
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    chunking = {"lengths": word_counts, "chunk_tokens": 24} if sorted_chunks else {}

    def encode_in_chunks(texts):  # same dropout masks as GradCache's chunks: the reference uses its chunking
        if not sorted_chunks:
            return torch.cat([encode(texts[i : i + 3]) for i in range(0, len(texts), 3)])
        plan = budget_batches(word_counts(texts), 3, 24)
        parts = [encode([texts[i] for i in idx]) for idx in plan]
        order = torch.tensor([i for idx in plan for i in idx], device=parts[0].device)
        return torch.cat(parts)[torch.argsort(order)]

    torch.manual_seed(1)
    plain_loss, _ = plain_step(encode_in_chunks, queries, docs, loss_fn)
    plain = grads()
    model.zero_grad()
    torch.manual_seed(1)
    cached_loss, metrics = gradcache_step(encode, queries, docs, loss_fn, chunk_size=3, **chunking)
    cached = grads()
    assert cached_loss.item() == pytest.approx(plain_loss.item(), rel=1e-5)
    assert "loss_pair_bce" in metrics and "loss_infonce" in metrics
    assert plain and plain.keys() == cached.keys()
    for name in plain:
        assert plain[name].abs().sum() > 0, name
        torch.testing.assert_close(cached[name], plain[name], rtol=1e-4, atol=1e-6, msg=name)
