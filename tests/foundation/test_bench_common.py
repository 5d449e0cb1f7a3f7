"""benchmarks/common.py: machine description and result files with ratios and goals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def common(tmp_path, monkeypatch, load_benchmark):
    module = load_benchmark("common")
    monkeypatch.setattr(module, "RESULTS", tmp_path)
    return module


@pytest.fixture
def generalize(load_benchmark):
    return load_benchmark("generalize")


def test_machine_info_describes_the_machine(common):
    info = common.machine_info()
    assert info["cores"] >= 1 and info["memory_gib"] > 0 and info["cpu_model"]
    assert info["date"][:2] == "20"


def test_write_result_adds_machine_and_date(common, tmp_path):
    path = common.write_result(
        "toy",
        {
            "raw": {"ours_s": 1.0, "baseline_s": 2.0},
            "ratios": {"speedup": 2.0},
            "goals": {"speedup": {"target": ">= 1.5", "met": True}},
        },
    )
    assert path == tmp_path / "toy.json"
    result = json.loads(path.read_text())
    assert result["ratios"] == {"speedup": 2.0} and result["goals"]["speedup"]["met"] is True
    assert result["machine"]["cores"] >= 1 and result["date"] == result["machine"]["date"]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"goals": {}}, r"lacks \['ratios'\]"),
        ({"ratios": {"x": "fast"}, "goals": {}}, "'ratios' must map names to numbers"),
        ({"ratios": {}, "goals": ["x"]}, "'goals' must map names to targets"),
    ],
)
def test_write_result_rejects_incomplete_payloads(common, payload, message):
    with pytest.raises(ValueError, match=message):
        common.write_result("bad", payload)


def test_an_experiment_joins_the_result_without_replacing_it(common, tmp_path):
    goals = {"gain": ">= 10"}
    common.record_experiment("toy", "first try", {"ratios": {"gain": -1.0}}, goals)  # no result yet: a skeleton
    assert json.loads((tmp_path / "toy.json").read_text())["ratios"] == {}
    common.write_result("toy", {"ratios": {"gain": 3.0}, "goals": goals, "experiments": {"old": {}}})
    common.record_experiment("toy", "lower lr", {"ratios": {"gain": 4.0}}, goals)
    result = json.loads((tmp_path / "toy.json").read_text())
    assert result["ratios"] == {"gain": 3.0}
    assert set(result["experiments"]) == {"old", "lower lr"} and result["experiments"]["lower lr"]["ratios"] == {
        "gain": 4.0
    }
    assert common.previous_result("missing") == {}


def test_generalize_keeps_an_earlier_budget_only_from_the_same_recipe(generalize):
    recipe = {"config": "configs/local.yaml", "config_hash": "abc", "overrides": []}
    previous = {
        "date": "2026-01-01T00:00:00+00:00",
        **recipe,
        "protocol": "p",
        "results": {"x1": {"ood_avg_gain": 1.0}, "x2": {"ood_avg_gain": 2.0}},
    }
    now = {"x1": {"ood_avg_gain": 1.5}, "x4": {"ood_avg_gain": 4.0}}
    kept = generalize.earlier_scales(previous, now, recipe, "p")
    assert kept == {"x2": {"date": "2026-01-01T00:00:00+00:00", "ood_avg_gain": 2.0}}  # x1 ran again: not kept
    assert generalize.earlier_scales(previous, now, {**recipe, "overrides": ["train.seed=1"]}, "p") == {}
    assert generalize.earlier_scales(previous, now, recipe, "other limits") == {}
    # the same file with other content (the recipe changed since): its old budgets are not this recipe's curve
    assert generalize.earlier_scales(previous, now, {**recipe, "config_hash": "def"}, "p") == {}


def test_generalize_trains_larger_budgets_only_on_this_recipes_data(generalize, tmp_path):
    from embedforge.config import load_config
    from embedforge.mine.run import stage_settings as mine_settings
    from embedforge.synth.run import stage_settings as synth_settings

    config = load_config(str(REPO / "configs" / "local.yaml"))
    for stage, settings in (("synth", synth_settings), ("mine", mine_settings)):
        (tmp_path / stage).mkdir()
        manifest = {"status": "complete", "config_hash": settings(config)[1]}
        (tmp_path / stage / "manifest.json").write_text(json.dumps(manifest))
    generalize.check_training_data(config, tmp_path)
    other = load_config(str(REPO / "configs" / "local.yaml"), ["mine.selection.num_negatives=3"])
    with pytest.raises(SystemExit, match=r"mine is not a complete mine stage of this recipe"):
        generalize.check_training_data(other, tmp_path)


def test_generalize_averages_per_label_and_per_family(generalize):
    rows = {
        "sick": {"data": "left out", "backbone": 50.0, "trained": 60.0, "minilm": 80.0, "gain": 10.0},
        "emotion": {"data": "left out", "backbone": 30.0, "trained": 28.0, "minilm": 40.0, "gain": -2.0},
        "tweet_sentiment_extraction": {
            "data": "left out",
            "backbone": 40.0,
            "trained": 44.0,
            "minilm": None,
            "gain": 4.0,
        },
        "stsb": {"data": "in-distribution", "backbone": 50.0, "trained": 70.0, "minilm": 85.0, "gain": 20.0},
    }
    out = generalize.averages(rows)
    assert out["ood_avg_gain"] == 4.0 and out["ood_worst_task_delta"] == -2.0 and out["id_avg_gain"] == 20.0
    assert out["ood_gain_by_family"] == {"classification": 1.0, "sts": 10.0}
    assert out["ood_avg_gain_except_classification"] == 10.0
    assert "ood_avg_minilm" not in out and out["id_avg_minilm"] == 85.0  # a missing MiniLM score: no average


def test_generalize_measures_from_the_starting_model_and_keeps_the_bidirectional_backbone(generalize):
    manifest = {
        "scores": {
            "sick": {"trained": 0.70, "bb?bidirectional=false": 0.50, "bb": 0.60, generalize.MINILM: 0.80},
            "stsb": {"trained": 0.75, "bb?bidirectional=false": 0.45, "bb": 0.55, generalize.MINILM: 0.85},
        }
    }
    labels = {"sick": "left out", "stsb": "in-distribution"}
    out = generalize.summarise(manifest, labels, "bb?bidirectional=false", "bb")
    assert out["tasks"]["sick"] == {
        "data": "left out", "backbone": 50.0, "trained": 70.0, "minilm": 80.0, "gain": 20.0,
        "untrained_bidirectional": 60.0,
    }  # fmt: skip
    assert out["ood_avg_untrained_bidirectional"] == 60.0 and out["id_avg_untrained_bidirectional"] == 55.0
    causal = generalize.summarise(manifest, labels, "bb", "bb")
    assert causal["tasks"]["sick"]["gain"] == 10.0 and "untrained_bidirectional" not in causal["tasks"]["sick"]
    assert "ood_avg_untrained_bidirectional" not in causal
