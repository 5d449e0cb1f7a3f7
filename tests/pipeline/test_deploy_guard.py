"""The deploy guard: a trained model that scores below its starting model on the validation slice is not served."""

from __future__ import annotations

from pathlib import Path

from embedforge.evaluate.registry import HELDOUT_TASK
from embedforge.pipeline.deploy_guard import decide

REPO = Path(__file__).resolve().parents[2]


def test_a_worse_trained_model_is_not_deployed() -> None:
    decision = decide({HELDOUT_TASK: {"trained": 0.41, "start": 0.52}, "other": {"trained": 0.9}}, "trained", "start")
    assert decision.deploy == "start" and (decision.trained_score, decision.start_score) == (0.41, 0.52)
    assert "0.4100 < 0.5200" in decision.reason


def test_an_equal_or_better_trained_model_is_deployed() -> None:
    assert decide({HELDOUT_TASK: {"trained": 0.52, "start": 0.52}}, "trained", "start").deploy == "trained"
    assert decide({HELDOUT_TASK: {"trained": 0.60, "start": 0.52}}, "trained", "start").deploy == "trained"


def test_without_a_validation_slice_the_trained_model_is_served_and_the_reason_says_so() -> None:
    decision = decide({"stsb": {"trained": 0.1, "start": 0.9}}, "trained", "start")
    assert decision.deploy == "trained" and HELDOUT_TASK in decision.reason and decision.start_score is None


def test_the_demo_verdict_names_each_model_and_the_decision(tmp_path) -> None:
    import json

    from embedforge.config import load_config
    from embedforge.config.evaluate import TRAINED
    from embedforge.pipeline.demo import MINILM, outcome_table

    config = load_config(REPO / "configs" / "documents.yaml")
    assert config.model.backbone == MINILM
    (tmp_path / "evaluate").mkdir()
    scores = {HELDOUT_TASK: {TRAINED: 0.30, MINILM: 0.35}, "dbpedia_entity_subset": {TRAINED: 0.52, MINILM: 0.51}}
    (tmp_path / "evaluate" / "manifest.json").write_text(json.dumps({"scores": scores}))
    table = outcome_table(config, tmp_path)
    assert "| task | starting model | all-MiniLM-L6-v2 | trained |" in table
    assert "| dbpedia_entity_subset | 51.00 | 51.00 | 52.00 |" in table
    assert f"| {HELDOUT_TASK} (validation slice: held-out synthetic queries) | 35.00 | 35.00 | 30.00 |" in table
    assert f"deployed: the starting model ({MINILM}), because the trained model scores 0.3000 < 0.3500" in table


def test_checkpoint_selection_takes_the_best_step_and_the_later_one_on_a_tie() -> None:
    from embedforge.train.selection import best_step

    assert best_step({50: 0.70, 100: 0.72, 150: 0.71}) == 100
    assert best_step({50: 0.72, 100: 0.72}) == 100
