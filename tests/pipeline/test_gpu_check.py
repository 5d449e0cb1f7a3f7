"""`make gpu-check` on a machine without a GPU says so and passes; its verdict reads the stages' manifests."""

from __future__ import annotations

import json

import pytest
import torch

from embedforge.pipeline.gpu_check import main, stage_problems, usage_problems


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU answer; a GPU machine runs the check")
def test_without_a_gpu_it_says_skipped_and_exits_zero(capsys) -> None:
    assert main([]) == 0
    assert "no GPU: skipped" in capsys.readouterr().out


def test_a_stage_that_ran_on_the_cpu_fails_the_check(tmp_path) -> None:
    cpu = {"device": "cpu", "device_count": 0, "dtype": "float32", "peak_accelerator_memory_mb": 0.0}
    gpu = {"device": "cuda", "device_count": 1, "dtype": "bfloat16", "peak_accelerator_memory_mb": 310.5}
    for stage, usage in (("mine", gpu), ("train", cpu)):
        (tmp_path / stage).mkdir()
        (tmp_path / stage / "manifest.json").write_text(json.dumps({"status": "complete", "usage": usage}))
    assert stage_problems(tmp_path, ["mine"]) == []
    assert stage_problems(tmp_path, ["train", "evaluate"]) == [
        "train: ran on 'cpu', not cuda",
        "train: peak GPU memory 0.0 MiB, expected > 0",
        f"evaluate: no complete manifest at {tmp_path / 'evaluate'}",
    ]
    assert usage_problems("serve /ready", {}) == [
        "serve /ready: ran on None, not cuda",
        "serve /ready: peak GPU memory None MiB, expected > 0",
    ]
