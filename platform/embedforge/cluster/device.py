"""The one place that decides where a Ray actor or task runs its model: on CUDA when Ray assigned it GPUs, else on
the CPU. Serving replicas and mining teachers use it, so a replica that reserves `num_gpus` encodes on its GPU."""

from __future__ import annotations


def assigned_device() -> str:
    """`cuda` when Ray gave this worker GPUs and CUDA is usable, `cpu` otherwise (and outside Ray)."""
    import ray
    import torch

    gpus = ray.get_gpu_ids() if ray.is_initialized() else []
    return "cuda" if gpus and torch.cuda.is_available() else "cpu"
