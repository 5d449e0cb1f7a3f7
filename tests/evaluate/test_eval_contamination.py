"""No score on training data: scored units the run trained on are found by a normalised hash, per task family."""

from __future__ import annotations

from pathlib import Path

from embedforge.config import load_config
from embedforge.data.schema import CorpusDocument, LabelledText, Query, RerankingGroup, ScoredPair, TrainingExample
from embedforge.evaluate.contamination import TrainingTexts, run_training_texts
from embedforge.evaluate.registry import build_task
from embedforge.evaluate.tasks import (
    ClassificationTask,
    ClusteringTask,
    PairClassificationTask,
    RerankingTask,
    RetrievalTask,
    STSTask,
)

REPO = Path(__file__).resolve().parents[2]


def _example(query: str, positive: str, negatives: list[str] | None = None) -> TrainingExample:
    return TrainingExample(
        id=query, task_name="t", task_type="retrieval", instruction="", query=query, positive=positive,
        negatives=negatives or [],
    )  # fmt: skip


SEEN = TrainingTexts.of(
    [_example("A man plays a guitar.", "Someone is playing music.", ["A dog sleeps."]), _example("refund?", "money")]
)


def test_each_family_counts_the_units_it_scores_with_case_and_whitespace_folded():
    docs = [CorpusDocument("d", "money")]
    retrieval = RetrievalTask(
        "r",
        "",
        corpus=docs,
        queries=[Query("1", "  REFUND? "), Query("2", "other")],
        qrels={"1": {"d": 1}, "2": {"d": 1}},
    )
    assert SEEN.contaminated_units(retrieval) == 1
    reranking = RerankingTask("rr", "", groups=[RerankingGroup("1", "refund?", ["money"], ["x"])])
    assert SEEN.contaminated_units(reranking) == 1
    # a pair counts only when the run trained on the two texts together, in either order
    sts = STSTask(
        "s", "",
        pairs=[
            ScoredPair("someone is playing music.", "a man plays a guitar.", 4.0),
            ScoredPair("A man plays a guitar.", "A cat.", 1.0),
            ScoredPair("A dog sleeps.", "A man plays a guitar.", 0.0),
        ],
    )  # fmt: skip
    assert SEEN.contaminated_units(sts) == 2
    pairs = PairClassificationTask("p", "", pairs=[ScoredPair("x", "y", 1.0), ScoredPair("y", "x", 0.0)])
    assert SEEN.contaminated_units(pairs) == 0
    labelled = [LabelledText("Refund?", "a"), LabelledText("new text", "b")]
    assert SEEN.contaminated_units(ClassificationTask("c", "", train=labelled, test=labelled[1:])) == 0
    assert SEEN.contaminated_units(ClassificationTask("c", "", train=labelled[1:], test=labelled)) == 1
    assert SEEN.contaminated_units(ClusteringTask("k", "", texts=labelled)) == 1


def test_a_clustering_task_on_the_split_the_run_trained_on_is_contaminated(shared_data, tmp_path):
    """The old demo trained on banking77 `train` and clustered the same file; the shipped profile does not."""
    config = load_config(
        REPO / "configs" / "tiny.yaml",
        [
            "data.sources=[{name: banking77, kind: shared, path: banking77, split: train, task_type: classification,"
            " max_examples: 200}]",
            "mine.sources=[]",
            "train.stages=[{name: s, datasets: [{source: banking77}], steps: 1, batch_size: 2}]",
        ],
    )
    seen = run_training_texts(config, tmp_path)
    clustering = build_task("banking77_clustering", config.evaluate)
    assert seen.contaminated_units(clustering) >= 200
    assert seen.contaminated_units(build_task("emotion_clustering", config.evaluate)) == 0


def test_decontaminating_drops_exactly_the_units_trained_on(shared_data, tmp_path):
    """The generalist profile trains on STS-B `train`, whose MSRpar pairs are MRPC pairs: those MRPC test pairs are
    dropped before scoring, the rest of the task is kept, and no task of the shipped profiles scores training data."""
    for profile in ("local.yaml", "tiny.yaml"):
        config = load_config(REPO / "configs" / profile)
        files = {s.name for s in config.data.sources if s.kind != "run"}  # no run dir here: no synthetic data
        config.data.sources = [s for s in config.data.sources if s.name in files]
        config.mine.sources = [s for s in config.mine.sources if s in files]
        for stage in config.train.stages:
            stage.datasets = [d for d in stage.datasets if d.source in files]
        seen = run_training_texts(config, tmp_path)
        for name in config.evaluate.tasks:
            task = build_task(name, config.evaluate)
            clean = seen.decontaminated(task)
            assert seen.contaminated_units(clean) == 0, (profile, name)
            assert clean.size() == task.size() - seen.contaminated_units(task), (profile, name)
            if profile == "local.yaml" and name == "mrpc":
                assert seen.contaminated_units(task) > 0
