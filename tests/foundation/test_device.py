"""Where a Ray worker runs its model: what Ray assigned it decides (embedforge.cluster.device)."""

from __future__ import annotations

import pytest
import torch

from embedforge.cluster.device import assigned_device, inference_dtype, read_usage, record_usage, stage_usage


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


@pytest.fixture
def ray_gave(monkeypatch):
    """Fake what Ray and CUDA report at the boundary; the device rule itself runs as it is."""
    import ray

    def give(gpu_ids: list[int], cuda: bool = True, bf16: bool = True) -> None:
        monkeypatch.setattr(ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray, "get_gpu_ids", lambda: list(gpu_ids))
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: bf16)

    return give


def test_assigned_gpus_mean_cuda_and_half_precision(ray_gave) -> None:
    ray_gave([0, 1])
    assert assigned_device() == "cuda"
    assert inference_dtype("auto", "cuda") == "bfloat16"
    assert inference_dtype("float32", "cuda") == "float32"  # the config forces one
    ray_gave([0], bf16=False)
    assert inference_dtype("auto", assigned_device()) == "float16"


def test_no_assigned_gpu_or_no_cuda_means_cpu_and_float32(ray_gave) -> None:
    ray_gave([])
    assert assigned_device() == "cpu"
    assert inference_dtype("auto", "cpu") == "float32"
    ray_gave([0], cuda=False)  # Ray declared a GPU this process cannot use
    assert assigned_device() == "cpu"


def test_usage_records_on_the_cpu_and_their_stage_summary(tmp_path) -> None:
    record = record_usage(tmp_path / "usage", "cpu", "float32")
    assert {k: record[k] for k in ("device", "device_count", "dtype", "peak_accelerator_memory_mb")} == {
        "device": "cpu",
        "device_count": 0,
        "dtype": "float32",
        "peak_accelerator_memory_mb": 0.0,
    }
    record_usage(tmp_path / "usage", "cpu", "float32")  # the same worker again: still one record
    assert len(read_usage(tmp_path / "usage")) == 1
    assert "node" in record  # the Ray node (None outside Ray)
    other = {**record, "worker": "gpu-node:7", "node": "a1", "device": "cuda", "device_count": 1, "dtype": "bfloat16"}
    summary = stage_usage([*read_usage(tmp_path / "usage"), {**other, "peak_accelerator_memory_mb": 512.0}])
    assert summary == {
        "device": "mixed",
        "device_count": 1,
        "dtype": "bfloat16,float32",
        "peak_accelerator_memory_mb": 512.0,
        "workers": 2,
        "nodes": 2,
    }
    assert stage_usage([])["device"] == "none"
