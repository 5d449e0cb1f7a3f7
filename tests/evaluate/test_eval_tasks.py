"""Task registry over the real shared data, custom task files, seeded limits and clear errors on bad files."""

from __future__ import annotations

import json

import pytest

from embedforge.config.evaluate import CustomTask, EvaluateConfig
from embedforge.data.delimited import DataFormatError
from embedforge.data.schema import LabelledText
from embedforge.evaluate import readers
from embedforge.evaluate.registry import HELDOUT_TASK, SHARED_TASKS, build_task, selected_tasks
from embedforge.evaluate.tasks import FAMILIES, ClassificationTask, RetrievalTask, split_train_test


def test_every_shared_dataset_is_a_task_and_every_family_is_covered(shared_data):
    from embedforge.data.shared import SHARED_DATASETS

    config = EvaluateConfig()
    assert {spec.dataset for spec in SHARED_TASKS.values()} == set(SHARED_DATASETS)
    families = set()
    for name in selected_tasks(config):
        task = build_task(name, config)
        assert task.size() > 0 and task.instruction, name
        families.add(task.family)
    assert families == set(FAMILIES)


def test_shared_task_contents(shared_data):
    config = EvaluateConfig()
    snli = build_task("snli", config)
    assert {p.score for p in snli.pairs} == {0.0, 1.0}  # neutral dropped
    banking = build_task("banking77", config)
    assert isinstance(banking, ClassificationTask)
    assert len(banking.test) == round(10003 * config.test_fraction)
    assert len(banking.train) + len(banking.test) == 10003
    trec = build_task("trec_dl_msmarco_subset", config)
    assert isinstance(trec, RetrievalTask) and len(trec.corpus) == 5000
    assert all(any(r > 0 for r in trec.qrels[q.query_id].values()) for q in trec.queries)


def test_limits_are_seeded_and_keep_judged_documents(shared_data):
    config = EvaluateConfig()
    stsb = build_task("stsb", config)
    assert stsb.limit(50, seed=3).pairs == stsb.limit(50, seed=3).pairs
    assert stsb.limit(50, seed=3).pairs != stsb.limit(50, seed=4).pairs
    assert stsb.limit(None).size() == stsb.size() == 1500
    trec = build_task("trec_dl_msmarco_subset", config).limit(3, seed=0)
    small = trec.limit_corpus(400, seed=0)
    judged = {d for q in trec.queries for d in trec.qrels[q.query_id]}
    kept = {d.doc_id for d in small.corpus}
    assert judged <= kept and len(kept) == max(400, len(judged))


def test_instruction_override_and_unknown_task_names(shared_data):
    config = EvaluateConfig(tasks=["stsb"], instructions={"stsb": "Find paraphrases."})
    assert build_task("stsb", config).instruction == "Find paraphrases."
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['nope'\]"):
        selected_tasks(EvaluateConfig(tasks=["stsb", "nope"]))


def test_synthetic_heldout_beir_folder_becomes_a_retrieval_task(tmp_path):
    heldout = tmp_path / "synth" / "heldout"
    (heldout / "qrels").mkdir(parents=True)
    (heldout / "corpus.jsonl").write_text(
        "\n".join(json.dumps({"_id": f"d{i}", "text": f"passage {i}", "title": ""}) for i in range(3)) + "\n"
    )
    (heldout / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "which passage"}) + "\n")
    (heldout / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td1\t1\n")
    config = EvaluateConfig()
    assert HELDOUT_TASK in selected_tasks(config, tmp_path)
    task = build_task(HELDOUT_TASK, config, tmp_path)
    assert task.family == "retrieval" and task.qrels == {"q0": {"d1": 1.0}} and len(task.corpus) == 3


def test_custom_tasks_from_files(tmp_path):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("text1\ttext2\tscore\na cat\ta kitten\t4.5\na car\ta banana\t0.5\n")
    labelled = tmp_path / "labels.jsonl"
    labelled.write_text("".join(json.dumps({"text": f"text {i}", "label": i % 2}) + "\n" for i in range(10)))
    groups = tmp_path / "rerank.jsonl"
    groups.write_text(json.dumps({"query": "q", "positives": ["yes"], "negatives": ["no", "nah"]}) + "\n")
    config = EvaluateConfig(
        custom_tasks=[
            CustomTask(name="my_sts", family="sts", path=str(pairs), instruction="Same meaning?"),
            CustomTask(name="my_cls", family="classification", path=str(labelled)),
            CustomTask(name="my_clusters", family="clustering", path=str(labelled)),
            CustomTask(name="my_rerank", family="reranking", path=str(groups)),
        ]
    )
    sts = build_task("my_sts", config)
    assert [(p.text1, p.score) for p in sts.pairs] == [("a cat", 4.5), ("a car", 0.5)]
    assert sts.instruction == "Same meaning?"
    cls = build_task("my_cls", config)
    assert len(cls.train) == 8 and len(cls.test) == 2 and {x.label for x in cls.train} <= {"0", "1"}
    assert build_task("my_clusters", config).size() == 10
    assert build_task("my_rerank", config).groups[0].negatives == ["no", "nah"]


def test_split_train_test_is_seeded_and_disjoint():
    items = [LabelledText(f"t{i}", str(i % 3)) for i in range(20)]
    train, test = split_train_test(items, 0.25, seed=1)
    assert len(test) == 5 and len(train) == 15
    assert {x.text for x in train}.isdisjoint({x.text for x in test})
    assert split_train_test(items, 0.25, seed=1) == (train, test)


@pytest.mark.parametrize(
    ("name", "content", "reader", "message"),
    [
        ("p.tsv", "text1\ttext2\tscore\na\tb\t1\nc\td\thigh\n", readers.read_scored_pairs, r"p\.tsv:3: score 'high'"),
        ("p.tsv", "a\tb\t1\nc\td\n", readers.read_scored_pairs, r"p\.tsv:2: expected 3 tab-separated fields"),
        (
            "p.jsonl",
            '{"text1": "a", "text2": "b", "score": 1}\n{"text1": "a"\n',
            readers.read_scored_pairs,
            r"p\.jsonl:2: invalid JSON",
        ),
        (
            "p.jsonl",
            '{"text1": "a", "text2": "b", "score": "x"}\n',
            readers.read_scored_pairs,
            r"p\.jsonl:1: 'score' must be a number",
        ),
        ("l.tsv", "text\tlabel\nhello\tgreet\nbye\t\n", readers.read_labelled_texts, r"l\.tsv:3: empty label"),
        (
            "l.jsonl",
            '{"text": "a", "label": "x"}\n\n{"text": "b"}\n',
            readers.read_labelled_texts,
            r"l\.jsonl:3: 'label' must be",
        ),
        (
            "r.jsonl",
            '{"query": "q", "positives": "yes", "negatives": []}\n',
            readers.read_reranking_groups,
            r"r\.jsonl:1: 'positives' must be a list",
        ),
        ("l.csv", "a,b\n", readers.read_labelled_texts, r"l\.csv: unsupported file type"),
        ("empty.tsv", "", readers.read_scored_pairs, r"empty\.tsv: no records"),
    ],
)
def test_malformed_files_fail_naming_file_and_line(tmp_path, name, content, reader, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(DataFormatError if "JSON" not in message else ValueError, match=message):
        reader(path)


def test_malformed_beir_qrels_fail_naming_file_and_line(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "d0", "text": "x"}) + "\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "y"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("q0\td0\t1\nq0\td0\tvery\n")
    config = EvaluateConfig(custom_tasks=[CustomTask(name="mine", family="retrieval", path=str(tmp_path))])
    with pytest.raises(DataFormatError, match=r"test\.tsv:2: relevance 'very' is not a number"):
        build_task("mine", config)


def test_config_validation_names_the_problem():
    with pytest.raises(ValueError, match="baseline_for_deltas 'x' is neither"):
        EvaluateConfig(baselines=["a"], baseline_for_deltas="x")
    with pytest.raises(ValueError, match="test_path only applies to classification"):
        CustomTask(name="t", family="sts", path="p.tsv", test_path="q.tsv")
    with pytest.raises(ValueError, match="samples_per_label only applies to classification"):
        CustomTask(name="t", family="clustering", path="p.tsv", samples_per_label=4)
    # a config travels to Ray workers as its dump: a custom task of any family comes back as it left
    config = EvaluateConfig(custom_tasks=[CustomTask(name="t", family="retrieval", path="folder")])
    assert EvaluateConfig.model_validate(config.model_dump()) == config
    with pytest.raises(ValueError, match=r"duplicate task names \['t'\]"):
        EvaluateConfig(
            custom_tasks=[CustomTask(name="t", family="sts", path="a"), CustomTask(name="t", family="sts", path="b")]
        )


def test_provenance_labels_tasks_by_what_the_config_trains_on():
    from pathlib import Path

    from embedforge.config import load_config
    from embedforge.evaluate.registry import IN_DISTRIBUTION, LEFT_OUT, task_provenance

    config = load_config(
        Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml",
        [
            "data.sources=[{name: nli, kind: shared, path: sick_nli, split: train}, {name: s, kind: run, path: synth}]",
            "mine.sources=[nli]",
            "train.stages=[{name: one, datasets: [{source: nli}, {source: s}], steps: 1, batch_size: 2}]",
        ],
    )
    # SICK's STS task is another view of the SICK sentences the run trained on: in-distribution, not left out
    assert task_provenance("sick", config) == IN_DISTRIBUTION
    assert task_provenance("sick_nli", config) == IN_DISTRIBUTION
    assert task_provenance("stsb", config) == LEFT_OUT
    assert task_provenance("emotion_clustering", config) == LEFT_OUT
    assert task_provenance(HELDOUT_TASK, config) == LEFT_OUT
    assert task_provenance("dbpedia_entity_subset", config) == LEFT_OUT
    # a file source inside a shared folder trained on that dataset: its corpus is no longer unseen
    titles = "{name: t, kind: title_body, path: dbpedia_entity_subset/corpus.jsonl}"
    with_titles = load_config(
        Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml",
        [
            f"data.sources=[{{name: nli, kind: shared, path: sick_nli, split: train}}, {titles}]",
            "mine.sources=[nli]",
            "train.stages=[{name: one, datasets: [{source: nli}, {source: t}], steps: 1, batch_size: 2}]",
        ],
    )
    assert task_provenance("dbpedia_entity_subset", with_titles) == IN_DISTRIBUTION
    assert task_provenance("trec_dl_msmarco_subset", with_titles) == LEFT_OUT


def test_classification_draws_follow_mteb_protocol():
    """Every experiment draws at most samples_per_label texts of each label (all of a rarer label), the draws
    differ between experiments, are seeded, and `limit` bounds the test split only."""
    train = [LabelledText(f"t{i}", "rare" if i % 10 == 0 else "common") for i in range(200)]
    test = [LabelledText(f"s{i}", "common") for i in range(50)]
    task = ClassificationTask("c", "", train=train, test=test, samples_per_label=8, experiments=5)
    draws = task.training_draws(seed=0)
    assert len(draws) == 5
    for draw in draws:
        labels = [train[i].label for i in draw]
        assert labels.count("rare") == 8 and labels.count("common") == 8
    assert len({tuple(d) for d in draws}) == 5
    assert task.training_draws(seed=0) == draws and task.training_draws(seed=1) != draws
    few = ClassificationTask("c", "", train=train[:25], test=test, samples_per_label=8, experiments=2)
    assert all([train[i].label for i in d].count("rare") == 3 for d in few.training_draws())
    limited = task.limit(20, seed=0)
    assert limited.train == train and len(limited.test) == 20
    with pytest.raises(ValueError, match="at least 2 labels"):
        ClassificationTask("c", "", train=test, test=test).training_draws()
    with pytest.raises(ValueError, match="must be >= 1"):
        ClassificationTask("c", "", train=train, test=test, experiments=0)


def test_shared_classification_tasks_use_mteb_samples_per_label(shared_data):
    config = EvaluateConfig(classification_experiments=3)
    per_label = {
        n: build_task(n, config).samples_per_label for n in SHARED_TASKS if SHARED_TASKS[n].family == "classification"
    }
    assert per_label == {"banking77": 8, "emotion": 16, "tweet_sentiment_extraction": 32, "amazon_counterfactual": 32}
    assert build_task("emotion", config).experiments == 3
