"""Which process layout and dtype a vLLM engine gets; the layout switch stays inside one engine (no vLLM run)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from embedforge.synth.engine import (
    EngineSettings,
    _multiprocessing_env,
    runs_float32,
    runs_in_process,
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


def test_float32_only_for_cpu_engines_without_native_bf16():
    auto = EngineSettings(model="m")
    assert runs_float32(auto, on_gpu=False, native_bf16=False)
    assert runs_float32(replace(auto, in_process=False), on_gpu=False, native_bf16=False)
    assert not runs_float32(auto, on_gpu=False, native_bf16=True)  # vLLM's bf16 kernels
    assert not runs_float32(auto, on_gpu=True, native_bf16=False)
    assert not runs_float32(replace(auto, dtype="bfloat16"), on_gpu=False, native_bf16=False)
    assert runs_float32(replace(auto, dtype="float32"), on_gpu=False, native_bf16=False)
