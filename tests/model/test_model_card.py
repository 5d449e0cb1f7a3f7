"""The exported model card says which run trained the model, on what, and how the run scored it."""

from __future__ import annotations

import pytest

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder
from embedforge.model.card import render_card, with_evaluation


@pytest.fixture(scope="module")
def embedder(tiny_model_dir):
    return load_embedder(ModelConfig(backbone=str(tiny_model_dir)))


def test_a_card_without_a_run_says_so(embedder):
    card = render_card(embedder, "merged")
    assert "## Training run" not in card and "- not recorded (no training run attached to this export)" in card
    assert "Not evaluated yet" in card


def test_the_run_its_data_and_then_its_evaluation(embedder):
    info = {
        "training_run": {"run": "/runs/demo", "settings hash": "abc123", "steps": "retrieval 4 at 4 examples"},
        "training_data": {"wikiqa": 64, "synthetic": 9},
        "data_origin": {"wikiqa": "mine", "synthetic": "source"},
        "notes": "a note",
    }
    card = render_card(embedder, "sentence_transformers", info)
    assert "## Training run\n\n- run: /runs/demo\n- settings hash: abc123\n" in card
    assert "- wikiqa: 64 examples, with the negatives and teacher scores mining gave them\n" in card
    assert "- synthetic: 9 examples, as the source gives them\n" in card
    scored = with_evaluation(card, {"stsb": {"spearman": 0.61234}}, "the run's evaluation (/runs/demo/evaluate)")
    assert "From the run's evaluation (/runs/demo/evaluate):\n\n| task | metric | value |" in scored
    assert "| stsb | spearman | 0.6123 |" in scored and "Not evaluated yet" not in scored
    assert scored.endswith("## Notes\n\na note\n")  # the sections after it stay
    again = with_evaluation(scored, {"stsb": {"spearman": 0.7}}, "a later evaluation")
    assert "| stsb | spearman | 0.7000 |" in again and "0.6123" not in again
