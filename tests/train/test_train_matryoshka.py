"""Matryoshka Representation Learning in the objective: each truncated size adds the same losses on the first d
coordinates, renormalised, and the config refuses sizes that cannot be cut."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from pydantic import ValidationError

from embedforge.config.train import LossesConfig, MatryoshkaConfig, TrainConfig
from embedforge.train.losses import truncated
from embedforge.train.objective import Targets, objective


def _batch(width: int = 8, batch: int = 4, per_example: int = 2, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    queries = F.normalize(torch.randn(batch, width, generator=generator), dim=-1)
    candidates = F.normalize(torch.randn(batch, per_example, width, generator=generator), dim=-1)
    nan = torch.full((batch,), float("nan"))
    return queries, candidates, Targets(torch.rand(batch, per_example, generator=generator), nan, nan)


def test_truncated_keeps_the_first_coordinates_at_unit_length_and_passes_gradients():
    vectors = torch.tensor([[3.0, 4.0, 12.0], [1.0, 0.0, 5.0]], requires_grad=True)
    cut = truncated(vectors, 2)
    assert torch.allclose(cut, torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
    cut[:, 0].sum().backward()
    assert vectors.grad is not None and vectors.grad[:, 2].abs().sum() == 0 and vectors.grad[0, 1] != 0
    for size in (0, 3, 4):
        with pytest.raises(ValueError, match="width 3"):
            truncated(vectors, size)


@pytest.mark.parametrize("in_batch", [False, True])
def test_each_size_adds_the_losses_of_the_cut_vectors(in_batch):
    queries, candidates, targets = _batch()
    losses = LossesConfig.model_validate({"infonce": {"temperature": 0.05}, "distill": {"weight": 0.5}})
    full, full_metrics = objective(queries, candidates, targets, losses, in_batch)
    sizes = MatryoshkaConfig(dims=[2, 4], weight=0.25)
    total, metrics = objective(queries, candidates, targets, losses, in_batch, sizes)
    parts = [objective(truncated(queries, s), truncated(candidates, s), targets, losses, in_batch)[0] for s in (2, 4)]
    assert total.item() == pytest.approx(full.item() + 0.25 * sum(p.item() for p in parts), rel=1e-6)
    assert metrics["loss_matryoshka"] == pytest.approx(sum(p.item() for p in parts) / 2, rel=1e-6)
    assert metrics["loss"] == pytest.approx(total.item(), rel=1e-6)
    assert metrics["accuracy"] == full_metrics["accuracy"]  # accuracy and the named terms stay the full size's
    assert metrics["loss_infonce"] == full_metrics["loss_infonce"]


def test_the_cut_sizes_train_the_first_coordinates_harder():
    queries, candidates, targets = _batch()
    queries.requires_grad_(True)
    losses = LossesConfig.model_validate({"infonce": {"temperature": 0.05}})
    objective(queries, candidates, targets, losses, False)[0].backward()
    plain = queries.grad.clone()
    queries.grad = None
    objective(queries, candidates, targets, losses, False, MatryoshkaConfig(dims=[2]))[0].backward()
    assert not torch.allclose(queries.grad[:, :2], plain[:, :2])
    # the last coordinates get the cut loss only through the full vector's normalisation: unchanged here
    assert torch.allclose(queries.grad[:, 2:], plain[:, 2:])


def test_embedding_distillation_matches_the_full_vectors_only():
    queries, candidates, targets = _batch()
    targets.teacher_queries = F.normalize(torch.randn(4, 8), dim=-1)
    targets.teacher_candidates = F.normalize(torch.randn(4, 2, 8), dim=-1)
    losses = LossesConfig.model_validate({"infonce": {"temperature": 0.05}, "embedding_distill": {"weight": 10.0}})
    full, _ = objective(queries, candidates, targets, losses, False)
    total, metrics = objective(queries, candidates, targets, losses, False, MatryoshkaConfig(dims=[4]))
    nce_only = LossesConfig.model_validate({"infonce": {"temperature": 0.05}})
    cut, _ = objective(truncated(queries, 4), truncated(candidates, 4), targets, nce_only, False)
    assert total.item() == pytest.approx(full.item() + cut.item(), rel=1e-6)
    assert metrics["loss_matryoshka"] == pytest.approx(cut.item(), rel=1e-6)


def test_distillation_over_the_collection_cuts_the_collection_too():
    queries, candidates, targets = _batch()
    collection = F.normalize(torch.randn(6, 8), dim=-1)
    targets.collection = collection
    targets.collection_rows = torch.tensor([[0, 1], [2, 3], [4, 5], [1, 2]])
    targets.collection_scores = torch.rand(4, 2)
    losses = LossesConfig.model_validate(
        {"infonce": {"weight": 0.0}, "distill": {"weight": 1.0, "over": "collection", "student_temperature": 0.05}}
    )
    total, metrics = objective(queries, candidates, targets, losses, False, MatryoshkaConfig(dims=[3]))
    cut_targets = Targets(targets.teacher_scores, targets.relevance, targets.max_relevance)
    cut_targets.collection = truncated(collection, 3)
    cut_targets.collection_rows, cut_targets.collection_scores = targets.collection_rows, targets.collection_scores
    cut, _ = objective(truncated(queries, 3), truncated(candidates, 3), cut_targets, losses, False)
    assert metrics["loss_matryoshka"] == pytest.approx(cut.item(), rel=1e-6)
    assert total.item() == pytest.approx(metrics["loss_distill"] + cut.item(), rel=1e-6)
    assert torch.equal(targets.collection, collection)  # the batch's own vectors are left as they were


def test_the_config_takes_increasing_sizes_and_keeps_earlier_hashes():
    assert TrainConfig.model_validate({"matryoshka": {"dims": [64, 128, 256]}}).matryoshka.dims == [64, 128, 256]
    for dims in ([128, 64], [64, 64], [0, 64]):
        with pytest.raises(ValidationError, match=r"increase strictly|greater than 0"):
            TrainConfig.model_validate({"matryoshka": {"dims": dims}})
    assert "matryoshka" not in TrainConfig().model_dump()  # a config that never sets it keeps its stage hashes
    assert "matryoshka" in TrainConfig.model_validate({"matryoshka": {"dims": [8]}}).model_dump()


def test_a_size_the_backbone_cannot_cut_fails_before_any_step(tiny_model_dir, tmp_path):
    from embedforge.config import load_config
    from embedforge.pipeline.runner import run_pipeline
    from embedforge.train.run import check_matryoshka_dims, run_train

    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    config = load_config(tiny, ["train.matryoshka.dims=[16, 64]"])  # the tiny Llama is 64 wide
    for run in (run_pipeline, run_train):
        with pytest.raises(ValueError, match=r"below the width of bundled:tiny-llama's embeddings \(64\)"):
            run(config, tmp_path / "run")
        assert not (tmp_path / "run").exists()
    check_matryoshka_dims(load_config(tiny, ["train.matryoshka.dims=[16, 32]"]))  # narrower sizes pass
