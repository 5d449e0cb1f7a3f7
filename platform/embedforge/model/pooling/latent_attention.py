"""Latent-attention pooling (NV-Embed 3.2, eq. 1).

The last hidden states H (L x d) are the queries; a trainable latent array K = V (r x d) gives keys and values:
O = softmax(Q K^T / sqrt(d_head)) V, computed per head on d/heads slices (multi-head attention). O goes through an
MLP (two linear layers with GELU between) and is mean-pooled over the pooling mask. The paper uses r = 512 latents
and 8 heads; both come from config `model.latent_attention`. Trained fully (not through LoRA; NV-Embed App. C).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from embedforge.model.pooling.base import Pooling, masked_mean


class LatentAttentionPooling(Pooling):
    def __init__(self, hidden_size: int, num_latents: int, num_heads: int, mlp_ratio: float = 1.0) -> None:
        super().__init__()
        if hidden_size % num_heads:
            raise ValueError(
                f"model.latent_attention.num_heads={num_heads} must divide the backbone hidden size {hidden_size}"
            )
        self.num_heads = num_heads
        self.latents = nn.Parameter(torch.randn(num_latents, hidden_size) * hidden_size**-0.5)
        inner = max(1, round(hidden_size * mlp_ratio))
        self.mlp = nn.Sequential(nn.Linear(hidden_size, inner), nn.GELU(), nn.Linear(inner, hidden_size))

    def cross_attend(self, hidden: torch.Tensor) -> torch.Tensor:
        """Multi-head softmax(Q K^T / sqrt(d_head)) V with Q = hidden (B, L, d) and K = V = latents (r, d)."""
        batch, length, dim = hidden.shape
        head_dim = dim // self.num_heads
        q = hidden.view(batch, length, self.num_heads, head_dim).transpose(1, 2)  # B, h, L, dh
        kv = self.latents.to(hidden.dtype).view(-1, self.num_heads, head_dim).transpose(0, 1)  # h, r, dh
        scores = torch.matmul(q, kv.transpose(-1, -2)) / math.sqrt(head_dim)  # B, h, L, r
        out = torch.matmul(scores.softmax(dim=-1), kv)  # B, h, L, dh
        return out.transpose(1, 2).reshape(batch, length, dim)

    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        mlp_dtype = self.mlp[0].weight.dtype
        return masked_mean(self.mlp(self.cross_attend(hidden).to(mlp_dtype)), pool_mask)
