"""Position-weighted mean pooling for causal decoders: SGPT (Muennighoff 2022), as MGH (seed 002) section 6 recalls.

Under a causal mask a token's state has seen only the tokens before it, so a plain mean gives the first words,
which saw almost nothing of the text, as much say as the last, which saw all of it. SGPT weights token i by its
position: w_i = i / sum_j j over the pooled tokens, positions counted from 1 at the first real token (the
instruction and a leading BOS count as positions but are not pooled), the rule sentence-transformers' Pooling
`weightedmean` mode applies, so an exported model encodes the same way.
"""

from __future__ import annotations

import torch

from embedforge.model.pooling.base import Pooling, masked_mean


class WeightedMeanPooling(Pooling):
    def forward(
        self,
        hidden: torch.Tensor,
        attention_mask: torch.Tensor,
        pool_mask: torch.Tensor,
        attentions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        positions = attention_mask.cumsum(dim=1)  # 1, 2, ... over real tokens; pool_mask is 0 on padding
        return masked_mean(hidden, positions * pool_mask)
