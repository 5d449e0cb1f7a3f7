"""Matryoshka Representation Learning (Kusupati et al., "Matryoshka Representation Learning", NeurIPS 2022,
section 3, eq. 1): the loss is summed over nested prefixes of the embedding, so its first d coordinates alone are
an embedding too. The prefix is renormalised, as the losses take unit vectors and as serving's `dimensions` cuts
(`embeddings/matryoshka.py`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def truncated(vectors: torch.Tensor, dim: int) -> torch.Tensor:
    """The first `dim` coordinates of every vector (last axis), L2-normalised; gradients flow through both."""
    if not 0 < dim < vectors.shape[-1]:
        raise ValueError(f"matryoshka: a truncated size must lie between 0 and the width {vectors.shape[-1]}: {dim}")
    return F.normalize(vectors[..., :dim], dim=-1)
