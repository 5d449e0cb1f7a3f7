"""Which process layout a vLLM engine gets, and that the switch does not leak into later engines (no vLLM run)."""

from __future__ import annotations

import os

import pytest
import torch

from embedforge.synth.engine import EngineSettings, _multiprocessing_env, runs_in_process

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
