"""Mean pooling over non-padding, non-instruction tokens (NV-Embed 3.2, 5.2.3)."""

from __future__ import annotations

import torch

from embedforge.model.pooling.base import Pooling, masked_mean


class MeanPooling(Pooling):
    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return masked_mean(hidden, pool_mask)
