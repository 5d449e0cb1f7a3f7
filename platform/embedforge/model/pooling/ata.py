"""Anchor-Token-Aware (ATA) pooling (MGH, seed 002, section 2.2, eqs. 3-5). No parameters.

From the final layer's attention maps A^h (heads h, S real tokens), each token i gets the anchor weight
w_i = sum_h sum_j log(A^h[j, i] * S + 1): the attention token i RECEIVES from every query j. The paper indexes
a_ij so that sum over its first index is 1 ("the sum of attention weights in the query dimension remains
constant"), i.e. its i runs over keys; in transformers' (query, key) layout that is column i. Weights are then
normalised to sum 1 over the pooled tokens (eq. 4) and the embedding is sum_i w~_i H_i (eq. 5).

Padding queries are left out of the sum and S counts real tokens only, so padding never changes a text's weights.
"""

from __future__ import annotations

import torch

from embedforge.model.pooling.base import Pooling


def anchor_weights(attentions: torch.Tensor, attention_mask: torch.Tensor, pool_mask: torch.Tensor) -> torch.Tensor:
    """Normalised ATA weights (B, L) from attentions (B, H, L, L), real-token mask and pooling mask (B, L)."""
    real = attention_mask.to(attentions.dtype)
    length = real.sum(dim=1).clamp(min=1).view(-1, 1, 1, 1)
    received = torch.log1p(attentions * length)  # log(a * S + 1), (B, H, query, key)
    received = received * real.view(real.shape[0], 1, -1, 1)  # drop padding queries
    weights = received.sum(dim=(1, 2)) * pool_mask.to(attentions.dtype)  # (B, key)
    totals = weights.sum(dim=1, keepdim=True)
    if bool((totals <= 0).any()):
        raise ValueError("ATA pooling: pooling mask selects no token (or all weights are zero) for some input")
    return weights / totals


class AnchorTokenPooling(Pooling):
    needs_attentions = True

    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attentions is None:
            raise ValueError("ATA pooling needs the last layer's attention maps; none were captured")
        weights = anchor_weights(attentions.to(torch.float32), attention_mask, pool_mask)
        return (hidden * weights.to(hidden.dtype).unsqueeze(-1)).sum(dim=1)
