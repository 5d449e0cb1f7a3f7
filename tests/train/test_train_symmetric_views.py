"""The generalist profile trains SNLI twice, each view rendered the way its task is scored.

Stage 1 trains SNLI as retrieval (the premise carries the instruction, the hypothesis is bare, LGAI 3); the stage-2
blend trains the same pairs as `task_type: nli`, symmetric (NV-Embed 4): both sides carry the instruction, as the
pair-classification scorer embeds SICK-NLI and SNLI.
"""

from __future__ import annotations

from pathlib import Path

from embedforge.config import load_config
from embedforge.config.data import DataSource
from embedforge.data.sources import load_source
from embedforge.evaluate.registry import build_task
from embedforge.train.batching import Batch, BatchItem
from embedforge.train.inputs import batch_inputs

REPO = Path(__file__).resolve().parents[2]


def _rendered(source: DataSource, name: str):
    examples = load_source(source).examples[:6]
    items = [BatchItem(ex, ex.negatives[:1], [float("nan")] * (1 + len(ex.negatives[:1]))) for ex in examples]
    return batch_inputs(Batch(step=0, source=name, level=None, items=items))


def test_profile_trains_snli_as_retrieval_and_as_the_pair_tasks_score_it(shared_data) -> None:
    config = load_config(REPO / "configs" / "local.yaml")
    sources = {source.name: source for source in config.data.sources}
    scored = build_task("sick_nli", config.evaluate).instruction

    queries, documents, _ = _rendered(sources["snli"], "snli")
    assert {q.task for q in queries} == {scored}
    assert {d.task for d in documents} == {None}, "the retrieval view's hypotheses must stay bare"

    queries, documents, _ = _rendered(sources["snli_pairs"], "snli_pairs")
    assert {q.task for q in queries} == {scored}
    assert {d.task for d in documents} == {scored}, "the symmetric view must give hypotheses the scored instruction"

    stage_sources = [{d.source for d in stage.datasets} for stage in config.train.stages]
    assert "snli" in stage_sources[0] and "snli_pairs" in stage_sources[1]
    assert "snli_pairs" in config.mine.sources
