"""bf16 end to end: a run that computes in bf16 holds its frozen weights (the LoRA backbone) in bf16 and keeps
float32 master weights for what trains; its step computes what the float32-held model computes under the same
autocast, within bf16's rounding."""

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

OVERRIDES = ["train.gradcache.enabled=true", "train.gradcache.chunk_size=4", "model.lora.dropout=0.0"]


def _batch() -> Batch:
    items = []
    for i in range(4):
        negatives = [f"negative {i} {j} " + "word " * (i + j) for j in range(2)]
        example = TrainingExample(f"e{i}", "t", "retrieval", "Find it", f"query {i}", f"positive {i}", negatives)
        items.append(BatchItem(example, negatives, [math.nan] * 3))
    return Batch(0, "t", None, items)


def _step(frozen_in_bf16: bool) -> tuple[dict[str, float], object]:
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml", OVERRIDES)
    torch.manual_seed(0)
    embedder = build_trainable(config, bf16=frozen_in_bf16)
    embedder.train()
    stage = config.train.stages[0]
    runner = StepRunner(Encoder(embedder), embedder, config.train, bf16=True, teacher=None)
    optimizer = make_optimizer(embedder.parameters(), stage.learning_rate, config.train.weight_decay)
    return runner(_batch(), stage, optimizer), embedder


def test_frozen_weights_are_held_in_bf16_and_trained_ones_in_float32(tiny_model_dir):
    config = load_config(REPO_ROOT / "configs" / "tiny.yaml")
    held = build_trainable(config, bf16=True)
    plain = build_trainable(config)
    frozen = [p for p in held.parameters() if not p.requires_grad]
    trained = [p for p in held.parameters() if p.requires_grad]
    assert frozen and trained
    assert {p.dtype for p in frozen} == {torch.bfloat16}
    assert {p.dtype for p in trained} == {torch.float32}
    assert sum(p.numel() for p in trained) == sum(p.numel() for p in plain.parameters() if p.requires_grad)

    def frozen_bytes(model: torch.nn.Module) -> int:
        return sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)

    assert frozen_bytes(held) * 2 == frozen_bytes(plain)


def test_a_bf16_step_with_bf16_frozen_weights_matches_float32_held_ones(tiny_model_dir):
    held_metrics, held = _step(frozen_in_bf16=True)
    plain_metrics, _ = _step(frozen_in_bf16=False)
    assert math.isfinite(held_metrics["loss"]) and math.isfinite(held_metrics["grad_norm"])
    assert held_metrics["loss"] == pytest.approx(plain_metrics["loss"], rel=2e-2)
    assert held_metrics["grad_norm"] == pytest.approx(plain_metrics["grad_norm"], rel=5e-2)
    # the optimizer stepped the float32 masters and left every frozen weight in bf16
    assert {p.dtype for p in held.parameters() if p.requires_grad} == {torch.float32}
    assert {p.dtype for p in held.parameters() if not p.requires_grad} == {torch.bfloat16}
