"""Batch planning: task-homogeneous, no repeated text, weighted mixing, curriculum, demonstrations, schedule."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from embedforge.config.train import InContextConfig, StageConfig
from embedforge.data.schema import TrainingExample
from embedforge.train.batching import StagePlan
from embedforge.train.curriculum import level_for_step, order_negatives
from embedforge.train.schedule import lr_factor, make_optimizer, make_scheduler


def _examples(source: str, n: int, task_type: str = "retrieval", levels: bool = False) -> list[TrainingExample]:
    out = []
    for i in range(n):
        negs = [f"{source}-neg{i}-{j}" for j in range(4)]
        out.append(
            TrainingExample(
                id=f"{source}-{i}",
                task_name=source,
                task_type=task_type,
                instruction=f"do {source}",
                query=f"{source} q{i}",
                positive=f"{source} p{i % (n - 2)}",  # a few positives repeat
                negatives=negs,
                negative_levels=[1, 2, 3, 4] if levels else [],
                positive_score=0.9,
                negative_scores=[0.5, 0.4, 0.3, 0.2],
            )
        )
    return out


def _stage(**kw) -> StageConfig:
    base = {"name": "s", "datasets": [{"source": "a"}], "steps": 8, "batch_size": 4, "num_negatives": 2}
    return StageConfig.model_validate({**base, **kw})


def test_batches_are_task_homogeneous_without_repeated_text():
    data = {"a": _examples("a", 20), "b": _examples("b", 20, "sts")}
    plan = StagePlan(data, _stage(datasets=[{"source": "a"}, {"source": "b"}], steps=30), world_size=2, seed=0)
    for step in range(30):
        halves = [plan.batch(step, r) for r in range(2)]
        assert len({h.source for h in halves}) == 1
        items = [it for h in halves for it in h.items]
        assert len(items) == 8 and {it.example.task_name for it in items} == {halves[0].source}
        texts = [t for it in items for t in (it.example.query, it.example.positive, *it.negatives)]
        assert len(texts) == len(set(texts)), f"step {step} repeats a text"
        assert all(len(it.negatives) == 2 and len(it.teacher_scores) == 3 for it in items)


def test_weighted_mixing_follows_weights():
    data = {"a": _examples("a", 40), "b": _examples("b", 40)}
    stage = _stage(datasets=[{"source": "a", "weight": 3}, {"source": "b", "weight": 1}], steps=400, batch_size=2)
    counts = Counter(src for src, _, _ in StagePlan(data, stage, 1, seed=1).global_batches)
    assert 0.68 < counts["a"] / 400 < 0.82


def test_a_source_leaves_the_mix_at_its_max_epochs(caplog):
    # 6 examples in batches of 2, at most twice each: 12 draws, then every later step comes from "a"
    data = {"a": _examples("a", 40), "few": _examples("few", 6)}
    datasets = [{"source": "a"}, {"source": "few", "weight": 3, "max_epochs": 2}]
    with caplog.at_level("INFO", logger="embedforge.train.batching"):
        plan = StagePlan(data, _stage(datasets=datasets, steps=40, batch_size=2), 1, seed=0)
    sources = [src for src, _, _ in plan.global_batches]
    assert sources.count("few") == 6 and plan.drawn["few"] == 12
    last_few = max(i for i, src in enumerate(sources) if src == "few")
    assert last_few < 20 and set(sources[last_few + 1 :]) == {"a"}
    assert "few 12 examples (2.0 epochs)" in caplog.text and "a 68 examples (1.7 epochs)" in caplog.text
    uncapped = StagePlan(
        data, _stage(datasets=[{"source": "a"}, {"source": "few", "weight": 3}], steps=40, batch_size=2), 1, seed=0
    )
    assert [src for src, _, _ in uncapped.global_batches].count("few") > 20  # the weight alone: 3 of every 4 steps
    # a cap the stage never reaches plans exactly the batches of no cap
    unreached = StagePlan(
        data,
        _stage(datasets=[{"source": "a"}, {"source": "few", "weight": 3, "max_epochs": 100}], steps=40, batch_size=2),
        1,
        seed=0,
    )
    assert [unreached.batch(s, 0).ids for s in range(40)] == [uncapped.batch(s, 0).ids for s in range(40)]


def test_a_stage_whose_every_source_reaches_max_epochs_fails_naming_it():
    data = {"a": _examples("a", 8)}
    with pytest.raises(ValueError, match=r"every source reached its max_epochs by step 4 of 10"):
        StagePlan(data, _stage(datasets=[{"source": "a", "max_epochs": 1}], steps=10, batch_size=2), 1, seed=0)


def test_plan_is_deterministic_and_covers_each_epoch():
    data = {"a": _examples("a", 24)}
    one = StagePlan(data, _stage(steps=6), 1, seed=3)
    two = StagePlan(data, _stage(steps=6), 1, seed=3)
    assert [one.batch(s, 0).ids for s in range(6)] == [two.batch(s, 0).ids for s in range(6)]
    seen = [i for s in range(6) for i in one.batch(s, 0).ids]
    assert len(set(seen)) >= 20  # an epoch of 24 mostly covered before repeats (a few wait for repeated texts)
    other = StagePlan(data, _stage(steps=6), 1, seed=4)
    assert [one.batch(s, 0).ids for s in range(6)] != [other.batch(s, 0).ids for s in range(6)]


def test_teacher_scores_follow_chosen_negatives_and_fill_is_nan():
    data = {"a": _examples("a", 20)}
    plan = StagePlan(data, _stage(num_negatives=6), 1, seed=0)
    item = plan.batch(0, 0).items[0]
    assert item.teacher_scores[:5] == pytest.approx([0.9, 0.5, 0.4, 0.3, 0.2])
    assert all(s != s for s in item.teacher_scores[5:])  # 2 random negatives, no teacher score
    assert item.negatives[4].startswith("a p")


def test_mgh_curriculum_feeds_easiest_level_first():
    levels = [level_for_step("mgh", s, 8, random.Random(0)) for s in range(8)]
    assert levels == [4, 4, 3, 3, 2, 2, 1, 1]
    assert [level_for_step("reverse", s, 8, random.Random(0)) for s in (0, 7)] == [1, 4]
    assert level_for_step("fixed:2", 5, 8, random.Random(0)) == 2
    assert {level_for_step("random", s, 8, random.Random(s)) for s in range(40)} == {1, 2, 3, 4}
    assert order_negatives(4, [1, 2, 3, 4], 3)[:2] == [2, 1]
    assert order_negatives(3, [], 2) == [0, 1, 2]
    data = {"a": _examples("a", 20, levels=True)}
    plan = StagePlan(data, _stage(curriculum="mgh", num_negatives=1), 1, seed=0)
    chosen = [plan.batch(s, 0).items[0].negatives[0][-1] for s in range(8)]  # neg index j = level - 1
    assert chosen == ["3", "3", "2", "2", "1", "1", "0", "0"]


def test_in_context_demonstrations_from_same_source():
    data = {"a": _examples("a", 20)}
    plan = StagePlan(data, _stage(steps=20), 1, seed=0, in_context=InContextConfig(fraction=0.5, k=2))
    items = [it for s in range(20) for it in plan.batch(s, 0).items]
    with_demos = [it for it in items if it.demonstrations]
    assert 0.3 < len(with_demos) / len(items) < 0.7
    for it in with_demos:
        assert len(it.demonstrations) == 2
        assert all(q.startswith("a q") and q != it.example.query for q, _ in it.demonstrations)


def test_small_source_trains_in_smaller_batches_without_repeated_text(caplog):
    # 7 examples whose positives repeat (p0..p4, two pairs share one): 5 groups linked by a shared text, so batches of
    # 2 per worker on 2 workers can always be filled; the large source keeps its batch of 4
    stage = _stage(datasets=[{"source": "a"}, {"source": "small"}], steps=40)
    plan = StagePlan({"a": _examples("a", 40), "small": _examples("small", 7)}, stage, world_size=2, seed=0)
    assert plan.left_out == {} and plan.rank_sizes == {"a": 4, "small": 2}
    sizes = set()
    for step in range(stage.steps):
        halves = [plan.batch(step, r) for r in range(2)]
        items = [it for h in halves for it in h.items]
        sizes.add((halves[0].source, len(halves[0].items), len(halves[1].items)))
        texts = [t for it in items for t in (it.example.query, it.example.positive, *it.negatives)]
        assert len(texts) == len(set(texts)), f"step {step} repeats a text"
    assert sizes == {("a", 4, 4), ("small", 2, 2)}
    expected = "source 'small' has 7 examples, fewer than one global batch (4 x 2 workers): its batches are 2"
    assert expected in caplog.text


def _example(i: int, query: str, positive: str, negatives: list[str]) -> TrainingExample:
    return TrainingExample(
        id=f"x-{i}",
        task_name="x",
        task_type="retrieval",
        instruction="do x",
        query=query,
        positive=positive,
        negatives=negatives,
        negative_scores=[0.1] * len(negatives),
    )


def test_examples_with_fewest_negatives_choose_first():
    # the demo's case: A's only negative is also B's first; B has others (one of them A's positive)
    rows = [_example(0, "qa", "pa", ["shared"]), _example(1, "qb", "pb", ["shared", "pa", "own"])]
    plan = StagePlan({"x": rows}, _stage(datasets=[{"source": "x"}], num_negatives=1), world_size=1, seed=0)
    for step in range(plan.stage.steps):
        by_id = {it.example.id: it.negatives for it in plan.batch(step, 0).items}
        assert by_id == {"x-0": ["shared"], "x-1": ["own"]}


def test_a_batch_that_cannot_give_every_example_negatives_trains_smaller(caplog):
    # three examples whose only negative is the same text, and no free positive to fill with: one per batch
    rows = [_example(i, f"q{i}", f"p{i}", ["same"]) for i in range(3)]
    plan = StagePlan({"x": rows}, _stage(datasets=[{"source": "x"}], num_negatives=1, steps=6), 1, seed=0)
    batches = [plan.batch(step, 0) for step in range(6)]
    assert [len(b.items) for b in batches] == [1] * 6
    assert {b.items[0].example.id for b in batches} == {"x-0", "x-1", "x-2"}  # the waiting ones come next
    assert plan.shortened == {"x": 6}
    assert "6 batches of source 'x' are smaller than planned" in caplog.text


def test_plan_leaves_out_a_source_without_one_example_per_worker_and_fails_when_none_is_left(caplog):
    stage = _stage(datasets=[{"source": "a"}, {"source": "tiny"}])
    # 3 examples sharing one positive: one group, fewer than one per worker on 3 workers
    plan = StagePlan({"a": _examples("a", 40), "tiny": _examples("tiny", 3)}, stage, world_size=3, seed=0)
    assert plan.left_out == {"tiny": 3}
    assert {plan.batch(s, 0).source for s in range(stage.steps)} == {"a"}
    assert "source 'tiny' left out: 3 examples, fewer than one per worker (3 workers)" in caplog.text
    with pytest.raises(ValueError, match="no source has one example per worker"):
        StagePlan({"a": _examples("a", 3)}, _stage(), world_size=3, seed=0)
    with pytest.raises(ValueError, match="no source has one example per worker"):
        StagePlan({}, _stage(), world_size=1, seed=0)


def test_warmup_then_linear_decay_and_restart():
    assert [round(lr_factor(s, 2, 6), 3) for s in range(6)] == [0.333, 0.667, 1.0, 0.75, 0.5, 0.25]
    param = torch.nn.Parameter(torch.zeros(1))
    opt = make_optimizer([param], lr=1e-3, weight_decay=0.0)
    sched = make_scheduler(opt, warmup_steps=0, total_steps=4)
    seen = []
    for _ in range(4):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4])
