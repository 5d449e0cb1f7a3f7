"""Gradient caching (Gao et al. 2021, "Scaling Deep Contrastive Learning Batch Size under Memory Limited Setup").

A contrastive batch larger than memory allows, with in-batch negatives still exact (recipe section 3):
1. embed every text in chunks without building graphs, remembering each chunk's RNG state (LoRA dropout);
2. compute the loss on the detached embeddings and backpropagate to them only;
3. re-embed each chunk with its RNG state restored and backpropagate the cached embedding gradients through it.
Peak activation memory is that of one chunk; the gradients equal those of the plain loss.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch

T = TypeVar("T")
EncodeFn = Callable[[Sequence[T]], torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, dict[str, float]]]


def _chunks(items: Sequence[T], size: int) -> list[Sequence[T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The CPU and every CUDA generator's state: dropout on a GPU draws from the CUDA generator."""
    return torch.get_rng_state(), (torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [])


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor]]) -> None:
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
) -> tuple[torch.Tensor, dict[str, float]]:
    """Same gradients as `plain_step`, at the memory of one chunk. `no_sync` (DDP's) defers the all-reduce
    until the last chunk's backward."""
    chunks = [("q", c) for c in _chunks(queries, chunk_size)] + [("d", c) for c in _chunks(documents, chunk_size)]
    states, reps = [], []
    with torch.no_grad():
        for _, chunk in chunks:
            states.append(_rng_state())
            reps.append(encode(chunk))
    n_q = sum(1 for kind, _ in chunks if kind == "q")
    q = torch.cat(reps[:n_q]).requires_grad_(True)
    d = torch.cat(reps[n_q:]).requires_grad_(True)
    loss, metrics = loss_fn(q, d)
    loss.backward()
    grads = list(torch.split(q.grad, [len(c) for _, c in chunks[:n_q]]))
    grads += list(torch.split(d.grad, [len(c) for _, c in chunks[n_q:]]))
    after = _rng_state()
    for i, ((_, chunk), state, grad) in enumerate(zip(chunks, states, grads, strict=True)):
        _set_rng_state(state)
        last = i == len(chunks) - 1
        context = no_sync() if (no_sync is not None and not last) else contextlib.nullcontext()
        with context:
            torch.dot(encode(chunk).flatten(), grad.flatten()).backward()
    _set_rng_state(after)
    return loss.detach(), metrics
