"""The embedder as trained: the configured backbone with fresh LoRA adapters (NV-Embed appendix C) and a fully
trained pooling head; without LoRA every backbone weight trains (but the token embeddings with
`train.freeze_token_embeddings`).

A run that computes in bf16 (`train.mixed_precision`) holds the weights that never train in bf16 too, whatever
`model.dtype` loaded them in (`auto` and `float32` load float32 for inference on a CPU): autocast would cast them to
bf16 for every matrix product anyway, so a LoRA run's frozen backbone costs half the memory and no cast per step.
The weights that train keep float32 master copies for the optimizer (peft keeps adapters in float32 over a bf16
base)."""

from __future__ import annotations

import torch

from embedforge.config import EmbedforgeConfig
from embedforge.model import Embedder, load_embedder
from embedforge.model.lora import add_lora


def build_trainable(config: EmbedforgeConfig, bf16: bool = False) -> Embedder:
    """The embedder with its trainable weights marked; with `bf16`, its frozen weights in bf16."""
    embedder = load_embedder(config.model)
    if config.model.lora.enabled:
        embedder.backbone = add_lora(embedder.backbone, config.model.lora)
    else:
        embedder.backbone.requires_grad_(True)
        if config.train.freeze_token_embeddings:
            embedder.backbone.get_input_embeddings().requires_grad_(False)
    embedder.pooling.requires_grad_(True)
    if bf16:
        for parameter in embedder.parameters():
            if not parameter.requires_grad and parameter.is_floating_point():
                parameter.data = parameter.data.to(torch.bfloat16)
    return embedder
