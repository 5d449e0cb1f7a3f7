"""InfoNCE over cosine similarities (MGH eq. 1; LGAI 4.1; NV-Embed 3.3).

Inputs are L2-normalised embeddings: `queries` (B, d) and `candidates` (B, C, d) where candidate 0 of each example
is its positive and 1..C-1 its hard negatives. With `in_batch=True` every query also scores the candidates of every
other example of the global batch, gathered across workers with gradients. The gathered layout is
[example 0: pos, neg1..negk][example 1: pos, ...]... in rank order, so the label of local example i on a worker
whose rows start at `offset` is `(offset + i) * C` (the sentence-transformers PR 3453 bug was assuming otherwise).

`symmetric=True` adds the reverse direction, each positive against every query of the global batch, and averages
the two cross-entropies (CLIP, Radford et al. 2021, sec. 2.3; GTE, Li et al. 2023, puts the same document-to-query
terms in its improved contrastive loss): a symmetric task (STS, NLI pairs with the instruction on both sides) is
trained in both of the directions it is scored in, from the same embeddings.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from embedforge.train.distributed import gather_with_grad


def infonce_logits(
    queries: torch.Tensor, candidates: torch.Tensor, temperature: float, in_batch: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B, columns) and the column of each query's positive."""
    if queries.ndim != 2 or candidates.ndim != 3 or candidates.shape[0] != queries.shape[0]:
        raise ValueError(
            f"infonce: expected queries (B, d) and candidates (B, C, d), got {tuple(queries.shape)} and "
            f"{tuple(candidates.shape)}"
        )
    batch, per_example, _ = candidates.shape
    if not in_batch:
        logits = torch.einsum("bd,bcd->bc", queries, candidates) / temperature
        return logits, torch.zeros(batch, dtype=torch.long, device=queries.device)
    gathered, offset = gather_with_grad(candidates)
    flat = gathered.reshape(-1, gathered.shape[-1])
    logits = queries @ flat.T / temperature
    labels = (offset + torch.arange(batch, device=queries.device)) * per_example
    return logits, labels


def reverse_logits(
    queries: torch.Tensor, positives: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B, global batch) of each positive (B, d) against every query of the global batch, gathered across
    workers with gradients, and the column of its own query."""
    gathered, offset = gather_with_grad(queries)
    logits = positives @ gathered.T / temperature
    return logits, offset + torch.arange(positives.shape[0], device=queries.device)


def infonce_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    temperature: float = 0.02,
    in_batch: bool = True,
    symmetric: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean cross-entropy of each query's positive among its candidates (with `symmetric`, averaged with that of
    each positive's query among the batch's queries); also returns the query-side top-1 accuracy."""
    logits, labels = infonce_logits(queries, candidates, temperature, in_batch)
    loss = F.cross_entropy(logits, labels)
    if symmetric:
        if not in_batch:
            raise ValueError(
                "infonce: the symmetric loss scores positives against the batch's queries; it needs in_batch"
            )
        reverse, own = reverse_logits(queries, candidates[:, 0], temperature)
        loss = (loss + F.cross_entropy(reverse, own)) / 2
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return loss, accuracy.detach()
