"""In-context demonstrations go before the query (LGAI 4.2): a plan whose prefixes leave no room for the query text
fails in the driver, before any Ray Train attempt, naming the limit."""

from __future__ import annotations

import pytest

from embedforge.data.schema import TrainingExample
from embedforge.train.batching import plan_stages
from embedforge.train.run import check_query_room


def _examples(n: int) -> dict[str, list[TrainingExample]]:
    rows = [
        TrainingExample(
            id=f"wikiqa-{i}",
            task_name="wikiqa",
            task_type="retrieval",
            instruction="Given a question, retrieve Wikipedia passages that answer the question",
            query=f"what is question number {i} about in some detail",
            positive=f"passage {i} answers question number {i} with a long explanation of the topic",
            negatives=[f"unrelated passage {i}-{j}" for j in range(2)],
        )
        for i in range(n)
    ]
    return {"wikiqa": rows}


def _config(tiny_config, fraction: float, max_query_length: int):
    return tiny_config.model_copy(
        update={
            "model": tiny_config.model.model_copy(update={"max_query_length": max_query_length}),
            "train": tiny_config.train.model_copy(
                update={
                    "in_context": tiny_config.train.in_context.model_copy(update={"fraction": fraction, "k": 2}),
                    "stages": tiny_config.train.stages[:1],
                }
            ),
        }
    )


def test_demonstrations_that_fill_the_query_length_fail_before_training(tiny_config):
    config = _config(tiny_config, fraction=1.0, max_query_length=48)
    plans = plan_stages(_examples(40), config.train, 1)
    with pytest.raises(
        ValueError, match=r"instruction and its in-context examples take \d+ tokens.*max_query_length=48"
    ):
        check_query_room(config, plans)


def test_room_left_for_the_query_passes(tiny_config):
    for fraction, length in ((1.0, 512), (0.0, 48)):
        config = _config(tiny_config, fraction=fraction, max_query_length=length)
        check_query_room(config, plan_stages(_examples(40), config.train, 1))
