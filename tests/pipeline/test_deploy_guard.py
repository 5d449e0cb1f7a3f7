"""The deploy guard: a trained model that does not beat its starting model on the guard's task (the validation slice,
or the user's judged queries) by the guard's margin is not served."""

from __future__ import annotations

from pathlib import Path

from embedforge.config.evaluate import HELDOUT_TASK, DeployGuard
from embedforge.pipeline.deploy_guard import decide

REPO = Path(__file__).resolve().parents[2]
SLICE = DeployGuard()


def test_a_worse_trained_model_is_not_deployed() -> None:
    decision = decide(
        {HELDOUT_TASK: {"trained": 0.41, "start": 0.52}, "other": {"trained": 0.9}}, "trained", "start", SLICE
    )
    assert decision.deploy == "start" and (decision.trained_score, decision.start_score) == (0.41, 0.52)
    assert "0.4100 < 0.5200" in decision.reason


def test_an_equal_or_better_trained_model_is_deployed() -> None:
    assert decide({HELDOUT_TASK: {"trained": 0.52, "start": 0.52}}, "trained", "start", SLICE).deploy == "trained"
    assert decide({HELDOUT_TASK: {"trained": 0.60, "start": 0.52}}, "trained", "start", SLICE).deploy == "trained"


def test_a_guard_on_judged_queries_deploys_only_a_gain_of_at_least_its_margin() -> None:
    guard = DeployGuard(task="my_queries", min_gain=0.005)
    scores = {HELDOUT_TASK: {"trained": 0.9, "start": 0.1}, "my_queries": {"trained": 0.804, "start": 0.80}}
    decision = decide(scores, "trained", "start", guard)
    assert decision.deploy == "start" and decision.task == "my_queries"
    assert "0.8040 < 0.8000 + 0.005 of its starting model on my_queries" in decision.reason
    scores["my_queries"]["trained"] = 0.81
    assert decide(scores, "trained", "start", guard).deploy == "trained"
    missing = decide({HELDOUT_TASK: {"trained": 0.1, "start": 0.9}}, "trained", "start", guard)
    assert missing.deploy == "trained" and "no task my_queries" in missing.reason


def test_a_guard_task_that_is_not_evaluated_fails_the_config() -> None:
    import pytest

    from embedforge.config import load_config
    from embedforge.config.loader import ConfigError
    from embedforge.evaluate.registry import selected_tasks

    with pytest.raises(ConfigError, match=r"deploy_guard\.task .mine. is not evaluated"):
        load_config(REPO / "configs" / "documents.yaml", ["evaluate.deploy_guard.task=mine"])
    everything = load_config(
        REPO / "configs" / "documents.yaml", ["evaluate.tasks=[all]", "evaluate.deploy_guard.task=x"]
    )
    with pytest.raises(ValueError, match=r"deploy_guard\.task: unknown task 'x'"):  # evaluation knows every name
        selected_tasks(everything.evaluate)
    judged = "{name: mine, family: retrieval, path: my_queries}"
    config = load_config(
        REPO / "configs" / "documents.yaml",
        [
            f"evaluate.custom_tasks=[{judged}]",
            "evaluate.tasks=[synthetic_heldout, mine]",
            "evaluate.deploy_guard.task=mine",
        ],
    )
    assert config.evaluate.deploy_guard.task == "mine" and selected_tasks(config.evaluate) == [HELDOUT_TASK, "mine"]
    assert "deploy_guard" not in load_config(REPO / "configs" / "documents.yaml").evaluate.model_dump()


def test_without_a_validation_slice_the_trained_model_is_served_and_the_reason_says_so() -> None:
    decision = decide({"stsb": {"trained": 0.1, "start": 0.9}}, "trained", "start", SLICE)
    assert decision.deploy == "trained" and HELDOUT_TASK in decision.reason and decision.start_score is None


def test_the_demo_verdict_names_each_model_labels_each_task_and_states_the_decision(tmp_path) -> None:
    import json

    from embedforge.config import load_config
    from embedforge.config.evaluate import TRAINED
    from embedforge.pipeline.demo import MINILM, outcome_table

    config = load_config(REPO / "configs" / "documents.yaml")
    start = config.model.backbone
    assert start != MINILM
    (tmp_path / "evaluate").mkdir()
    scores = {
        HELDOUT_TASK: {TRAINED: 0.30, start: 0.35, MINILM: 0.33},
        "dbpedia_entity_subset": {TRAINED: 0.54, start: 0.53, MINILM: 0.51},
    }
    manifest = {
        "scores": scores,
        "data": {HELDOUT_TASK: "left out", "dbpedia_entity_subset": "left out"},
        "average_by_data": {"left out": {TRAINED: 0.42, start: 0.44, MINILM: 0.42}},
    }
    (tmp_path / "evaluate" / "manifest.json").write_text(json.dumps(manifest))
    table = outcome_table(config, tmp_path)
    assert "| task | data | starting model | all-MiniLM-L6-v2 | trained |" in table
    assert "| dbpedia_entity_subset | left out | 53.00 | 51.00 | 54.00 |" in table
    slice_row = f"| {HELDOUT_TASK} (validation slice: held-out synthetic queries) | left out | 35.00 | 33.00 | 30.00 |"
    assert slice_row in table
    assert "| **average, left out** | | 44.00 | 42.00 | 42.00 |" in table
    assert f"deployed: the starting model ({start}), because the trained model scores 0.3000 < 0.3500" in table


def test_the_generalist_verdict_shows_left_out_tasks_beside_in_distribution_ones(tmp_path) -> None:
    """configs/local.yaml trains on STS-B and SNLI: their tasks are in-distribution, SICK is left out, and a model
    a task was not scored with shows "-"."""
    import json

    from embedforge.config import load_config
    from embedforge.config.evaluate import TRAINED
    from embedforge.evaluate.registry import task_provenance
    from embedforge.pipeline.demo import MINILM, outcome_table
    from embedforge.pipeline.steps import starting_model

    config = load_config(REPO / "configs" / "local.yaml")
    start = starting_model(config)
    scores = {"stsb": {TRAINED: 0.76, start: 0.49, MINILM: 0.86}, "sick": {TRAINED: 0.73, MINILM: 0.80}}
    data = {task: task_provenance(task, config) for task in scores}
    assert data == {"stsb": "in-distribution", "sick": "left out"}
    averages = {"in-distribution": {TRAINED: 0.76, start: 0.49, MINILM: 0.86}, "left out": {TRAINED: 0.73}}
    (tmp_path / "evaluate").mkdir()
    (tmp_path / "evaluate" / "manifest.json").write_text(
        json.dumps({"scores": scores, "data": data, "average_by_data": averages})
    )
    lines = outcome_table(config, tmp_path).splitlines()
    assert "| stsb | in-distribution | 49.00 | 86.00 | 76.00 |" in lines
    assert "| sick | left out | - | 80.00 | 73.00 |" in lines
    assert lines.index("| **average, in-distribution** | | 49.00 | 86.00 | 76.00 |") < lines.index(
        "| **average, left out** | | - | - | 73.00 |"
    )


def test_checkpoint_selection_takes_the_best_step_and_the_later_one_on_a_tie() -> None:
    from embedforge.train.selection import best_step

    assert best_step({50: 0.70, 100: 0.72, 150: 0.71}) == 100
    assert best_step({50: 0.72, 100: 0.72}) == 100


def test_the_demo_verdict_labels_the_guard_task_and_decides_on_it(tmp_path) -> None:
    import json

    from embedforge.config import load_config
    from embedforge.config.evaluate import TRAINED
    from embedforge.pipeline.demo import MINILM, outcome_table
    from embedforge.pipeline.steps import starting_model

    judged = "{name: mine, family: retrieval, path: my_queries}"
    overrides = [
        f"evaluate.custom_tasks=[{judged}]",
        "evaluate.tasks=[synthetic_heldout, mine]",
        "evaluate.deploy_guard={task: mine, min_gain: 0.005}",
    ]
    config = load_config(REPO / "configs" / "documents.yaml", overrides)
    start = starting_model(config)
    (tmp_path / "evaluate").mkdir()
    scores = {HELDOUT_TASK: {TRAINED: 0.80, start: 0.70, MINILM: 0.6}, "mine": {TRAINED: 0.62, start: 0.60}}
    (tmp_path / "evaluate" / "manifest.json").write_text(json.dumps({"scores": scores, "data": {}}))
    table = outcome_table(config, tmp_path)
    assert "| mine (deploy guard) | - | 60.00 | - | 62.00 |" in table
    assert "deployed: the trained model, because the trained model scores 0.6200 >= 0.6000 + 0.005 on mine" in table
