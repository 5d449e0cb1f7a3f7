"""The teacher path of distillation: the teacher a config names is loaded and encodes each step's inputs; embedding
distillation is the MSE between the student's and the teacher's embeddings of them (NV-Embed A.2 on pooled
embeddings), in-batch soft labels the KL to the teacher's scores over the whole batch (LGAI 4.1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embedforge.config import load_config
from embedforge.data.schema import TrainingExample
from embedforge.train.batching import Batch, BatchItem
from embedforge.train.inputs import Encoder, batch_inputs
from embedforge.train.trainable import build_trainable
from embedforge.train.worker import StepRunner, load_teacher

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"


def _config(teacher: str, weight: float = 1.0, loss: str = "embedding_distill: {weight: %s}"):
    return load_config(
        TINY,
        [
            "model.lora.enabled=false",
            "model.pooling=mean",
            f"train.teacher={teacher}",
            "train.stages=[{name: s, datasets: [{source: wikiqa}], steps: 1, batch_size: 2, num_negatives: 1,"
            f" learning_rate: 1.0e-3, losses: {{infonce: {{weight: {1.0 - weight}}}, {loss % weight}}}}}]",
        ],
    )


def _batch() -> Batch:
    items = [
        BatchItem(
            TrainingExample(
                id=f"e{i}",
                task_name="wikiqa",
                task_type="retrieval",
                instruction="Find it",
                query=f"question {i}",
                positive=f"the answer number {i}",
                negatives=[f"a wrong answer {i}"],
            ),
            [f"a wrong answer {i}"],
            [float("nan")] * 2,
        )
        for i in range(2)
    ]
    return Batch(0, "wikiqa", None, items)


def _perturb(teacher: Encoder) -> None:
    with torch.no_grad():
        for param in teacher.embedder.parameters():
            param.add_(0.05 * torch.randn_like(param))


def test_the_starting_model_as_teacher_anchors_the_student_and_another_teacher_pulls_it(tiny_model_dir):
    config = _config("bundled:tiny-llama")
    assert config.model.backbone == "bundled:tiny-llama"
    stage = config.train.stages[0]
    teacher = load_teacher(config, torch.device("cpu"))
    assert teacher is not None and not any(p.requires_grad for p in teacher.embedder.parameters())

    torch.manual_seed(0)
    student = build_trainable(config)
    student.train()
    runner = StepRunner(Encoder(student), student, config.train, False, teacher)
    optimizer = torch.optim.SGD([p for p in student.parameters() if p.requires_grad], lr=1e-3)
    # the anchor: the teacher is the student before training, so the first step's distance is zero
    assert runner(_batch(), stage, optimizer)["loss_embedding_distill"] == pytest.approx(0.0, abs=1e-10)

    # a different teacher: the loss is the MSE between the two models' embeddings of the step's inputs
    _perturb(teacher)
    queries, documents, _ = batch_inputs(_batch())
    with torch.no_grad():
        student.eval()
        expected = torch.cat(
            [Encoder(student)(queries) - teacher(queries), Encoder(student)(documents) - teacher(documents)]
        )
        student.train()
    measured = runner(_batch(), stage, optimizer)["loss_embedding_distill"]
    assert measured > 1e-6
    assert measured == pytest.approx(float(expected.pow(2).mean()), rel=1e-3)


def test_no_teacher_is_loaded_when_no_stage_distils(tiny_model_dir):
    assert load_teacher(_config("bundled:tiny-llama", weight=0.0), torch.device("cpu")) is None


def test_in_batch_soft_labels_are_the_teachers_scores_over_every_candidate_of_the_step(tiny_model_dir):
    config = _config("bundled:tiny-llama", loss="distill: {weight: %s, scores: teacher}")
    stage = config.train.stages[0]
    teacher = load_teacher(config, torch.device("cpu"))
    assert teacher is not None
    torch.manual_seed(0)
    student = build_trainable(config)
    student.train()
    runner = StepRunner(Encoder(student), student, config.train, False, teacher)
    optimizer = torch.optim.SGD([p for p in student.parameters() if p.requires_grad], lr=1e-3)
    # the teacher is the student before training: same scores, no loss
    assert runner(_batch(), stage, optimizer)["loss_distill"] == pytest.approx(0.0, abs=1e-6)

    _perturb(teacher)
    queries, documents, _ = batch_inputs(_batch())
    with torch.no_grad():
        student.eval()
        s = Encoder(student)(queries) @ Encoder(student)(documents).T / 0.05
        t = teacher(queries) @ teacher(documents).T / 0.05
        student.train()
    expected = torch.nn.functional.kl_div(s.log_softmax(1), t.softmax(1), reduction="batchmean")
    measured = runner(_batch(), stage, optimizer)["loss_distill"]
    assert measured > 1e-6
    assert measured == pytest.approx(float(expected), rel=1e-3)


def test_teacher_scores_need_a_teacher():
    with pytest.raises(ValueError, match="distill with scores: teacher, but no teacher is set"):
        load_config(
            TINY,
            [
                "train.stages=[{name: s, datasets: [{source: wikiqa}], steps: 1,"
                " losses: {distill: {weight: 1.0, scores: teacher}}}]",
            ],
        )
