"""Where a Ray worker runs its model: what Ray assigned it decides (embedforge.cluster.device)."""

from __future__ import annotations

import pytest
import torch

from embedforge.cluster.device import assigned_device


def test_a_worker_without_gpus_runs_on_the_cpu(ray_cluster) -> None:
    @ray_cluster.remote(num_cpus=1, num_gpus=0)
    def where() -> str:
        return assigned_device()

    assert ray_cluster.get(where.remote()) == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_a_worker_given_a_gpu_runs_on_cuda(ray_cluster) -> None:
    @ray_cluster.remote(num_cpus=1, num_gpus=1)
    def where() -> str:
        return assigned_device()

    assert ray_cluster.get(where.remote()) == "cuda"
