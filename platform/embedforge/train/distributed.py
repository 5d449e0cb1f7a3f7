"""Gathering embeddings across data-parallel workers with gradients, so in-batch negatives span every worker.

NV-Embed 3.3 / MGH eq. 1 use in-batch negatives; with data parallelism the "batch" is the global one. The gather
keeps autograd: `torch.distributed.nn.functional.all_gather` sums the gradients of every worker's loss back into
each worker's own slice, so DDP's gradient averaging yields the gradient of the mean global loss.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) when not distributed."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_with_grad(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Concatenate `tensor` (same shape on every worker) over workers along dim 0, rank order.

    Returns the gathered tensor and the offset of this worker's rows in it.
    """
    rank, size = world()
    if size == 1:
        return tensor, 0
    from torch.distributed.nn.functional import all_gather

    parts = all_gather(tensor.contiguous())
    return torch.cat(parts, dim=0), rank * tensor.shape[0]
