"""Pooling heads selectable by config `model.pooling`: mean, weighted_mean, cls, last,
latent_attention, ata (one module each)."""

from __future__ import annotations

from embedforge.config.model import POOLING_HEADS, ModelConfig
from embedforge.model.pooling.ata import AnchorTokenPooling
from embedforge.model.pooling.base import Pooling
from embedforge.model.pooling.cls import ClsPooling
from embedforge.model.pooling.last import LastTokenPooling
from embedforge.model.pooling.latent_attention import LatentAttentionPooling
from embedforge.model.pooling.mean import MeanPooling
from embedforge.model.pooling.weighted_mean import WeightedMeanPooling

__all__ = [
    "AnchorTokenPooling",
    "ClsPooling",
    "LastTokenPooling",
    "LatentAttentionPooling",
    "MeanPooling",
    "Pooling",
    "WeightedMeanPooling",
    "build_pooling",
]


def build_pooling(config: ModelConfig, hidden_size: int) -> Pooling:
    """The pooling head named by `config.pooling` (resolved: not `auto`) for a backbone of width `hidden_size`."""
    if config.pooling == "mean":
        return MeanPooling()
    if config.pooling == "weighted_mean":
        return WeightedMeanPooling()
    if config.pooling == "cls":
        return ClsPooling()
    if config.pooling == "last":
        return LastTokenPooling()
    if config.pooling == "ata":
        return AnchorTokenPooling()
    if config.pooling == "latent_attention":
        la = config.latent_attention
        return LatentAttentionPooling(hidden_size, la.num_latents, la.num_heads, la.mlp_ratio)
    raise ValueError(f"unknown pooling {config.pooling!r}; known: {', '.join(POOLING_HEADS)}")
