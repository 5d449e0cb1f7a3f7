"""First-token ([CLS]) pooling, the choice of BERT-family embedders such as bge (sentence-transformers `cls`).

The first real token is found from the attention mask, whatever the pooling mask leaves out, as
sentence-transformers reads it.
"""

from __future__ import annotations

import torch

from embedforge.model.pooling.base import Pooling


class ClsPooling(Pooling):
    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        first = attention_mask.to(torch.long).argmax(dim=1)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), first]
