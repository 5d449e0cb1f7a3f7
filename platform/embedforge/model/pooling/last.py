"""Last-token (EOS) pooling, the E5-mistral / LGAI-Embedding choice (LGAI 4.1; NV-Embed 3.2 discusses it).

The last pooled position is found from the mask itself, so left and right padding both work.
"""

from __future__ import annotations

import torch

from embedforge.model.pooling.base import Pooling


def last_positions(pool_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last 1 in each row of `pool_mask` (B, L); fails on an all-zero row."""
    mask = pool_mask.to(torch.long)
    if bool((mask.sum(dim=1) == 0).any()):
        raise ValueError("pooling mask selects no token for some input (empty text after the instruction?)")
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return (positions * mask).argmax(dim=1)


class LastTokenPooling(Pooling):
    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, last_positions(pool_mask)]
