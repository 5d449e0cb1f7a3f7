"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup").

A contrastive batch larger than memory allows, with in-batch negatives still exact (recipe section 3):
1. embed every text in chunks without building graphs, remembering each chunk's RNG state (LoRA dropout);
2. compute the loss on the detached embeddings and backpropagate to them only;
3. re-embed each chunk with its RNG state restored and backpropagate the cached embedding gradients through it.
Peak activation memory is that of one chunk; the gradients equal those of the plain loss.

Given the texts' token lengths, each side's texts are chunked longest first: similar lengths share a chunk (little
padding on a CPU, and on a GPU, where decoders run packed, chunks of even size), and with a token budget a chunk of
short texts holds more of them, so its matrix products stay large while the activation memory stays that of the
budget. The loss sees the embeddings in the batch's own order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

from embedforge.model.batching import budget_batches

T = TypeVar("T")
EncodeFn = Callable[[Sequence[T]], torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The CPU and every CUDA generator's state: dropout on a GPU draws from the CUDA generator."""
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])


def set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
    cpu, cuda = state
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)


def plain_step(
    encode: EncodeFn, queries: Sequence[T], documents: Sequence[T], loss_fn: LossFn
) -> tuple[torch.Tensor, dict[str, float]]:
    """Embed everything with gradients, compute the loss, backpropagate."""
    loss, metrics = loss_fn(encode(queries), encode(documents))
    loss.backward()
    return loss.detach(), metrics


def gradcache_step(
    encode: EncodeFn,
    queries: Sequence[T],
    documents: Sequence[T],
    loss_fn: LossFn,
    chunk_size: int,
    no_sync: Callable[[], Any] | None = None,
    lengths: Callable[[Sequence[T]], list[int]] | None = None,
    chunk_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Same gradients as `plain_step`, at the memory of one chunk. `no_sync` (DDP's) defers the all-reduce
    until the last chunk's backward. `lengths` gives each text's token count: chunks then go longest first, within
    `chunk_tokens` (see the module docstring); without it, chunks of `chunk_size` in the given order."""
    sides = []
    for texts in (queries, documents):
        if lengths is None:
            plan = [list(range(i, min(i + chunk_size, len(texts)))) for i in range(0, len(texts), chunk_size)]
        else:
            plan = budget_batches(lengths(texts), chunk_size, chunk_tokens)
        sides.append([(idx, [texts[i] for i in idx]) for idx in plan])
    chunks = sides[0] + sides[1]
    states, reps = [], []
    with torch.no_grad():
        for _, chunk in chunks:
            states.append(rng_state())
            reps.append(encode(chunk))
    n_q = len(sides[0])
    # the loss sees each side in the batch's order; each chunk's rows come back through `positions`
    positions = [torch.tensor(idx, device=reps[0].device) for idx, _ in chunks]
    q = _in_order(reps[:n_q], positions[:n_q], len(queries)).requires_grad_(True)
    d = _in_order(reps[n_q:], positions[n_q:], len(documents)).requires_grad_(True)
    loss, metrics = loss_fn(q, d)
    loss.backward()
    grads = [q.grad[p] for p in positions[:n_q]] + [d.grad[p] for p in positions[n_q:]]
    after = rng_state()
    for i, ((_, chunk), state, grad) in enumerate(zip(chunks, states, grads, strict=True)):
        set_rng_state(state)
        last = i == len(chunks) - 1
        context = no_sync() if (no_sync is not None and not last) else contextlib.nullcontext()
        with context:
            torch.dot(encode(chunk).flatten(), grad.flatten()).backward()
    set_rng_state(after)
    return loss.detach(), metrics


def _in_order(parts: list[torch.Tensor], positions: list[torch.Tensor], n: int) -> torch.Tensor:
    """The chunks' rows placed back at their texts' positions in the batch."""
    out = parts[0].new_empty(n, parts[0].shape[1])
    for part, where in zip(parts, positions, strict=True):
        out[where] = part
    return out
