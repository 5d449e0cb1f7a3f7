"""The embedder as trained: the configured backbone with fresh LoRA adapters (NV-Embed appendix C) and a fully
trained pooling head; without LoRA every backbone weight trains (but the token embeddings with
`train.freeze_token_embeddings`)."""

from __future__ import annotations

from embedforge.config import EmbedforgeConfig
from embedforge.model import Embedder, load_embedder
from embedforge.model.lora import add_lora


def build_trainable(config: EmbedforgeConfig) -> Embedder:
    embedder = load_embedder(config.model)
    if config.model.lora.enabled:
        embedder.backbone = add_lora(embedder.backbone, config.model.lora)
    else:
        embedder.backbone.requires_grad_(True)
        if config.train.freeze_token_embeddings:
            embedder.backbone.get_input_embeddings().requires_grad_(False)
    embedder.pooling.requires_grad_(True)
    return embedder
