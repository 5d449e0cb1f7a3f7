"""Pair-relevance binary cross-entropy (seed 004, eqs. 2-5).

Every (anchor, candidate) pair is a binary prediction with logit s = alpha * cos + beta. Labels are 0 except the
anchor's own positive, which gets z = 1, or the graded z = c + (1 - c) * r / R when the example carries a graded
relevance r > 0 of a top grade R (eq. 4). The loss sums over candidates and averages over anchors (eq. 2). beta
defaults to the label prior log(p / (1 - p)) with p the fraction of positive pairs (eq. 3, binarised labels):
about -log(2B - 1) with in-batch negatives and one hard negative.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from embedforge.train.distributed import gather_with_grad


def graded_labels(relevance: torch.Tensor, max_relevance: torch.Tensor, floor: float) -> torch.Tensor:
    """Eq. 4: z = c + (1 - c) * r / R for r > 0, else 0; NaN relevance (binary data) gives 1."""
    binary = torch.isnan(relevance)
    r = torch.nan_to_num(relevance, nan=0.0)
    top = torch.where(torch.isnan(max_relevance) | (max_relevance <= 0), torch.ones_like(r), max_relevance)
    z = torch.where(r > 0, (floor + (1 - floor) * r / top).clamp(max=1.0), torch.zeros_like(r))
    return torch.where(binary, torch.ones_like(z), z)


def prior_bias(num_positive: int, num_pairs: int) -> float:
    """Eq. 3 with tau = 1: log(p / (1 - p)), p = positives / pairs."""
    if not 0 < num_positive < num_pairs:
        raise ValueError(f"pair_bce: cannot derive beta from {num_positive} positives among {num_pairs} pairs")
    p = num_positive / num_pairs
    return math.log(p / (1 - p))


def pair_bce_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    alpha: float = 20.0,
    beta: float | None = None,
    positive_labels: torch.Tensor | None = None,
    in_batch: bool = True,
) -> torch.Tensor:
    """Eq. 2 (or eq. 5 without in-batch pairs). `candidates` (B, C, d), candidate 0 the positive.

    `positive_labels` (B,) are the targets z of the own positives (default 1); every other pair has z = 0.
    """
    batch, per_example, _ = candidates.shape
    if in_batch:
        gathered, offset = gather_with_grad(candidates)
        cos = queries @ gathered.reshape(-1, gathered.shape[-1]).T
        columns = (offset + torch.arange(batch, device=queries.device)) * per_example
    else:
        cos = torch.einsum("bd,bcd->bc", queries, candidates)
        columns = torch.zeros(batch, dtype=torch.long, device=queries.device)
    z = torch.zeros_like(cos)
    pos = positive_labels if positive_labels is not None else torch.ones(batch, device=cos.device)
    z[torch.arange(batch, device=cos.device), columns] = pos.to(cos.dtype)
    if beta is None:
        beta = prior_bias(int((z > 0).sum().item()), z.numel())
    logits = alpha * cos + beta
    per_pair = F.binary_cross_entropy_with_logits(logits, z, reduction="none")
    return per_pair.sum(dim=1).mean()
