"""Train config validation messages, and the objective's weighting of the configured loss terms."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from embedforge.config.train import LossesConfig, StageConfig, TrainConfig
from embedforge.train.objective import Targets, objective, positive_on_top

STAGE = {"name": "s", "datasets": [{"source": "a"}], "steps": 4}


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"stages": [STAGE, STAGE]}, "duplicate stage names"),
        ({"backend": "nccl"}, "nccl needs GPU"),
        ({"stages": [{**STAGE, "losses": {"embedding_distill": {"weight": 1}}}]}, "no teacher is set"),
        ({"stages": [{**STAGE, "curriculum": "fixed:7"}]}, "unknown curriculum"),
        ({"stages": [{**STAGE, "losses": {"infonce": {"weight": 0}}}]}, "every loss weight is 0"),
        (
            {"stages": [{**STAGE, "losses": {"distill": {"weight": 1, "scores": "teacher", "positive": "top"}}}]},
            "raises the positive's mined score",
        ),
        (
            {"stages": [{**STAGE, "in_batch_negatives": False, "losses": {"infonce": {"symmetric": True}}}]},
            "symmetric scores each positive against the batch's other queries",
        ),
    ],
)
def test_train_config_rejects_with_clear_message(train, message):
    with pytest.raises(ValidationError, match=message):
        TrainConfig.model_validate(train)


def test_yaml_no_stays_a_string_and_still_sets_a_boolean(tmp_path):
    from embedforge.config import load_config

    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    config = load_config(tiny, ["train.mixed_precision=no", "train.use_gpu=no", "model.normalize=false"])
    assert (config.train.mixed_precision, config.train.use_gpu, config.model.normalize) == ("no", False, False)
    written = tmp_path / "config.yaml"  # the same in a config file
    written.write_text(tiny.read_text().replace("train:\n", "train:\n  mixed_precision: no\n", 1))
    assert load_config(written).train.mixed_precision == "no"
    with pytest.raises(ValidationError, match="mixed_precision"):
        TrainConfig.model_validate({"mixed_precision": True})  # a boolean names no mode


def _batch():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    cands = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 0.0]]])
    nan = torch.full((2,), float("nan"))
    return q, cands, Targets(torch.tensor([[0.9, 0.1], [0.8, 0.2]]), nan, nan)


def test_objective_sums_weighted_terms():
    q, cands, targets = _batch()
    losses = LossesConfig.model_validate(
        {"infonce": {"weight": 1.0, "temperature": 1.0}, "pair_bce": {"weight": 0.5}, "distill": {"weight": 2.0}}
    )
    total, metrics = objective(q, cands, targets, losses, in_batch=False)
    expected = metrics["loss_infonce"] + 0.5 * metrics["loss_pair_bce"] + 2.0 * metrics["loss_distill"]
    assert total.item() == pytest.approx(expected, rel=1e-6)
    assert metrics["loss_infonce"] == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    assert metrics["accuracy"] == 1.0


def test_positive_top_raises_the_positive_to_its_lists_highest_score_and_nothing_else():
    """`distill.positive: top`: the generated query's own document is never below another candidate in the target."""
    inf, nan = float("inf"), float("nan")
    scores = torch.tensor([[0.1, 0.3, 0.2], [0.5, 0.4, -inf], [nan, 0.2, nan], [nan, nan, -inf]])
    raised = positive_on_top(scores)
    expected = torch.tensor([[0.3, 0.3, 0.2], [0.5, 0.4, -inf], [0.2, 0.2, nan], [nan, nan, -inf]])
    assert torch.equal(raised.isnan(), expected.isnan())
    assert torch.equal(raised.nan_to_num(), expected.nan_to_num())
    assert scores[0, 0].item() == pytest.approx(0.1)  # the batch's own scores are left as they were

    q, cands, targets = _batch()  # the first query's positive scored 0.9 of 1.0 in total; raised, it ties
    targets.teacher_scores = torch.tensor([[0.2, 0.8], [0.8, 0.2]])
    losses = {"infonce": {"weight": 0.0}, "distill": {"weight": 1.0, "teacher_temperature": 1.0}}
    as_scored = objective(q, cands, targets, LossesConfig.model_validate(losses), in_batch=False)[1]
    losses["distill"]["positive"] = "top"
    on_top = objective(q, cands, targets, LossesConfig.model_validate(losses), in_batch=False)[1]
    targets.teacher_scores = torch.tensor([[0.8, 0.8], [0.8, 0.2]])
    by_hand = objective(q, cands, targets, LossesConfig.model_validate(losses), in_batch=False)[1]
    assert on_top["loss_distill"] == pytest.approx(by_hand["loss_distill"], rel=1e-6)
    assert on_top["loss_distill"] < as_scored["loss_distill"]  # the student already ranks each positive first


def test_objective_embedding_distill_needs_and_uses_teacher_embeddings():
    q, cands, targets = _batch()
    losses = LossesConfig.model_validate({"infonce": {"weight": 0.0}, "embedding_distill": {"weight": 1.0}})
    with pytest.raises(ValueError, match="teacher embeddings"):
        objective(q, cands, targets, losses, in_batch=False)
    targets.teacher_queries = torch.zeros(2, 2)
    targets.teacher_candidates = cands.clone()
    total, metrics = objective(q, cands, targets, losses, in_batch=False)
    assert total.item() == pytest.approx(0.5 * 2 / 6)  # queries differ by 1 in one of 2 dims; candidates match
    assert metrics["loss_embedding_distill"] == pytest.approx(total.item())


def test_stage_defaults_follow_nv_embed():
    stage = StageConfig.model_validate(STAGE)
    assert stage.in_batch_negatives and stage.num_negatives == 7 and stage.losses.infonce.weight == 1.0


def test_per_worker_and_global_batch_decide_each_other():
    from embedforge.config.train import TrainConfig

    stage = {"name": "s", "datasets": [{"source": "a"}], "batch_size": 16}
    derived = TrainConfig(num_workers=4, stages=[stage])
    assert derived.global_batch(derived.stages[0]) == 64 and derived.stages[0].global_batch_size is None
    paper = TrainConfig(num_workers=32, stages=[{"name": "s", "datasets": [{"source": "a"}], "global_batch_size": 128}])
    assert paper.stages[0].batch_size == 4 and paper.global_batch(paper.stages[0]) == 128
    # re-validated for another worker count (the pipeline dumps and reloads configs), the global batch holds
    moved = TrainConfig.model_validate({**paper.model_dump(), "num_workers": 8})
    assert moved.stages[0].batch_size == 16 and moved.global_batch(moved.stages[0]) == 128
    with pytest.raises(ValueError, match="does not divide evenly"):
        TrainConfig(num_workers=3, stages=[{"name": "s", "datasets": [{"source": "a"}], "global_batch_size": 128}])


def test_the_gpu_profile_trains_with_the_papers_global_batch():
    from pathlib import Path

    from embedforge.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "configs" / "nv-embed-v2.yaml")
    assert [config.train.global_batch(s) for s in config.train.stages] == [128, 128]
    assert [s.batch_size for s in config.train.stages] == [4, 4]
