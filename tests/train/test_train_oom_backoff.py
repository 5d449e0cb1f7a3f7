"""A GradCache step that runs out of GPU memory is redone with chunks of half the tokens, from the step's own random
state, giving the step a run configured with those chunks would have taken."""

from __future__ import annotations

import math

import pytest
import torch

from embedforge.config import load_config
from embedforge.data.schema import TrainingExample
from embedforge.paths import REPO_ROOT
from embedforge.train.batching import Batch, BatchItem
from embedforge.train.inputs import Encoder
from embedforge.train.schedule import make_optimizer
from embedforge.train.trainable import build_trainable
from embedforge.train.worker import StepRunner


def runner_and_batch(chunk_tokens: int) -> tuple[StepRunner, Batch, object, torch.optim.Optimizer]:
    config = load_config(
        REPO_ROOT / "configs" / "tiny.yaml",
        ["train.gradcache.enabled=true", "train.gradcache.chunk_size=8", f"train.gradcache.chunk_tokens={chunk_tokens}",
         "model.lora.dropout=0.2"],
    )  # fmt: skip
    torch.manual_seed(0)
    embedder = build_trainable(config)
    embedder.train()
    stage = config.train.stages[0]
    items = []
    for i in range(4):
        negatives = [f"negative {i} {j} " + "word " * (i + j) for j in range(2)]
        example = TrainingExample(f"e{i}", "t", "retrieval", "Find it", f"query {i}", f"positive {i}", negatives)
        items.append(BatchItem(example, negatives, [math.nan] * 3))
    runner = StepRunner(Encoder(embedder), embedder, config.train, bf16=False, teacher=None)
    optimizer = make_optimizer(embedder.parameters(), stage.learning_rate, config.train.weight_decay)
    return runner, Batch(0, "t", None, items), stage, optimizer


def trained_weights(runner: StepRunner) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in runner.params])


def test_out_of_memory_halves_the_chunks_and_redoes_the_step(tiny_model_dir, monkeypatch):
    small, batch, stage, optimizer = runner_and_batch(chunk_tokens=32)
    torch.manual_seed(7)
    expected = small(batch, stage, optimizer)

    big, batch, stage, optimizer = runner_and_batch(chunk_tokens=64)
    backward = big._backward
    calls = []

    def first_call_runs_out(*args):
        calls.append(big.chunk_tokens)
        if len(calls) == 1:
            backward(*args)  # half a step's work done, gradients left behind, the random state moved on
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return backward(*args)

    monkeypatch.setattr(big, "_backward", first_call_runs_out)
    torch.manual_seed(7)
    metrics = big(batch, stage, optimizer)
    assert calls == [64, 32] and big.chunk_tokens == 32 and metrics["gradcache_chunk_tokens"] == 32
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    assert torch.allclose(trained_weights(big), trained_weights(small), atol=1e-7)


def test_out_of_memory_with_one_text_per_chunk_is_raised(tiny_model_dir, monkeypatch):
    runner, batch, stage, optimizer = runner_and_batch(chunk_tokens=32)
    runner.chunk_tokens = 1  # one text per chunk: nothing smaller to try

    def out_of_memory(*args):
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(runner, "_backward", out_of_memory)
    with pytest.raises(torch.OutOfMemoryError):
        runner(batch, stage, optimizer)
