"""benchmarks/negation.py: which pairs differ by a negation, in the scored SICK-NLI pairs and in training data."""

from __future__ import annotations

import pytest

from embedforge.data.io import write_parquet
from embedforge.data.schema import ScoredPair, TrainingExample


@pytest.fixture
def negation(load_benchmark):
    return load_benchmark("negation")


def test_one_negated_side_is_a_difference(negation) -> None:
    assert negation.differs_by_negation("A deer is jumping over a fence", "A deer isn't jumping over the fence")
    assert negation.differs_by_negation("Nobody is in front of the building", "Several people are in front of it")
    assert negation.differs_by_negation("There is no boy playing", "The boys are playing outdoors")
    # both negated, or neither: no difference; "nothing" inside another word is no cue
    assert not negation.differs_by_negation("There is no man", "A man is not smiling")
    assert not negation.differs_by_negation("A man is playing a guitar", "A woman is slicing an onion")
    assert not negation.differs_by_negation("Notes on the piano", "A nobleman plays the piano")
    assert negation.negation_cues("He can't and won't, not ever") == 3


def test_pairs_split_into_entailed_negated_and_other_contradictions(negation) -> None:
    pairs = [
        ScoredPair("A man is playing a guitar", "A person plays a guitar", 1.0),
        ScoredPair("A man is playing a guitar", "There is no man playing a guitar", 0.0),
        ScoredPair("A man is playing a guitar", "A man is sleeping", 0.0),
    ]
    assert negation.pair_groups(pairs) == {
        "entailment": [0],
        "negated_contradiction": [1],
        "other_contradiction": [2],
    }


def test_training_shares_count_positive_negative_pairs_per_source(negation, tmp_path) -> None:
    def example(i: int, source: str, negatives: list[str]) -> TrainingExample:
        return TrainingExample(
            id=f"{source}-{i}", task_name=source, task_type="retrieval", instruction="i", query="q",
            positive="A dog runs on the beach", negatives=negatives,
        )  # fmt: skip

    examples = [
        example(0, "snli", ["A dog is not running", "A cat sleeps"]),
        example(1, "snli", ["Two men cook", "A child swims"]),
        example(2, "stsb", ["No dog runs on the beach"]),
    ]
    write_parquet(examples, tmp_path / "data" / "part-00000.parquet", TrainingExample)
    assert negation.training_negation_shares(tmp_path) == {"all": 0.4, "snli": 0.25, "stsb": 1.0}
