"""Which process layout and linear kernels a vLLM engine gets; neither switch leaks into later engines (no vLLM run)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from embedforge.synth.engine import (
    EngineSettings,
    _multiprocessing_env,
    _torch_linear,
    runs_in_process,
    uses_torch_float32_linear,
)

VAR = "VLLM_ENABLE_V1_MULTIPROCESSING"


def test_layout_follows_config_else_cpu_and_one_worker():
    cpu = not torch.cuda.is_available()
    assert runs_in_process(EngineSettings(model="m")) is cpu
    assert runs_in_process(EngineSettings(model="m", tensor_parallel_size=2)) is False
    assert runs_in_process(EngineSettings(model="m", in_process=False)) is False
    assert runs_in_process(EngineSettings(model="m", in_process=True)) is True


@pytest.mark.parametrize("before", [None, "1", "0"])
def test_in_process_switch_is_scoped_to_one_engine(monkeypatch, before):
    if before is None:
        monkeypatch.delenv(VAR, raising=False)
    else:
        monkeypatch.setenv(VAR, before)
    with _multiprocessing_env(True):
        assert os.environ[VAR] == "0"
    assert os.environ.get(VAR) == before
    with _multiprocessing_env(False):
        assert os.environ.get(VAR) == before  # a multiprocess engine keeps whatever the user set
    assert os.environ.get(VAR) == before


def test_float32_torch_linear_only_for_in_process_cpu_engines_without_native_bf16():
    auto = EngineSettings(model="m", in_process=True)
    assert uses_torch_float32_linear(auto, on_gpu=False, native_bf16=False)
    assert not uses_torch_float32_linear(auto, on_gpu=False, native_bf16=True)  # vLLM's bf16 kernels
    assert not uses_torch_float32_linear(auto, on_gpu=True, native_bf16=False)
    assert not uses_torch_float32_linear(replace(auto, in_process=False), on_gpu=False, native_bf16=False)
    assert not uses_torch_float32_linear(replace(auto, dtype="bfloat16"), on_gpu=False, native_bf16=False)
    assert uses_torch_float32_linear(replace(auto, dtype="float32"), on_gpu=False, native_bf16=False)
    assert not uses_torch_float32_linear(replace(auto, dtype="float32"), on_gpu=False, native_bf16=True)


@pytest.mark.parametrize("enabled", [True, False])
def test_torch_linear_switch_is_scoped_to_one_engine(enabled):
    import vllm._custom_ops as ops

    before = ops._supports_onednn
    with _torch_linear(enabled):
        assert ops._supports_onednn is (False if enabled else before)
    assert ops._supports_onednn is before
