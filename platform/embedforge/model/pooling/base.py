"""The pooling interface: token states (B, L, d) plus a pooling mask (B, L) in, one vector per text out.

The pooling mask is 1 on tokens that may be pooled: real (non-padding) tokens that are not part of the
instruction prefix (NV-Embed 3.2 / 4: instruction tokens are attended to but excluded from pooling).
"""

from __future__ import annotations

import torch
from torch import nn


class Pooling(nn.Module):
    """Base class. `attention_mask` marks real tokens, `pool_mask` the poolable ones; `needs_attentions` poolings
    also receive the last layer's attention maps (B, H, L, L)."""

    needs_attentions: bool = False

    def output_dim(self, hidden_size: int) -> int:
        return hidden_size

    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` (B, L, d) over positions where `mask` (B, L) is 1, or weighted by a non-negative `mask`;
    fails on an all-zero row."""
    weights = mask.to(values.dtype).unsqueeze(-1)
    counts = weights.sum(dim=1)
    if bool((counts == 0).any()):
        raise ValueError("pooling mask selects no token for some input (empty text after the instruction?)")
    return (values * weights).sum(dim=1) / counts
