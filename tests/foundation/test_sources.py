"""`load_source` for every source kind: shared datasets through their family's converter, files, BEIR, runs."""

from __future__ import annotations

import pytest

from embedforge.config.data import DataSource
from embedforge.data.converters import make_example
from embedforge.data.io import write_jsonl, write_parquet
from embedforge.data.schema import TrainingExample
from embedforge.data.shared import SHARED_DATASETS
from embedforge.data.sources import BEIR_INSTRUCTION, TITLE_BODY_INSTRUCTION, convert_source, load_source, source_drops
from embedforge.runs.stage import StageRun

FAMILY_TYPES = {
    "sts": "sts",
    "pair": "pair",
    "nli": "retrieval",
    "classification": "classification",
    "reranking": "retrieval",
    "retrieval": "retrieval",
}


@pytest.mark.parametrize("name", sorted(SHARED_DATASETS))
def test_every_shared_dataset_converts(shared_data, name):
    dataset = SHARED_DATASETS[name]
    source = DataSource(name=f"my-{name}", kind="shared", path=name, max_examples=50)
    examples = load_source(source, None).examples
    assert len(examples) == 50
    assert {e.task_name for e in examples} == {f"my-{name}"}
    assert {e.task_type for e in examples} == {FAMILY_TYPES[dataset.family]}
    assert {e.instruction for e in examples} == {dataset.instruction}
    assert len({e.id for e in examples}) == 50
    assert all(e.query and e.positive and e.positive != e.query for e in examples)
    if dataset.family == "classification":
        assert all(len(e.negatives) == source.negatives_per_example for e in examples)
    if name == "trec_dl_msmarco_subset":
        assert all(e.max_relevance == 3.0 and 1 <= e.relevance <= 3 for e in examples)


def test_overrides_sampling_and_determinism(shared_data):
    source = DataSource(
        name="nli", kind="shared", path="snli", split="test", task_type="nli", instruction="Find it", max_examples=20
    )
    first, second = load_source(source, None, seed=3).examples, load_source(source, None, seed=3).examples
    assert [e.id for e in first] == [e.id for e in second]
    assert [e.id for e in load_source(source, None, seed=4).examples] != [e.id for e in first]
    assert {(e.task_type, e.instruction) for e in first} == {("nli", "Find it")}
    converted = convert_source(source.model_copy(update={"max_examples": None}), None)
    assert converted.drops["neutral label"] > 3000
    assert 3000 < len(converted.examples) < 3500  # MANIFEST: about 3.2k triplets per file
    assert convert_source(source, None).drops["over max_examples"] == len(converted.examples) - 20


def test_rows_lost_and_sources_short_of_max_examples_are_named_for_the_manifest(shared_data):
    """No silent loss: what a stage manifest (and so pipeline.json) shows for a source, beyond the log line."""
    source = DataSource(name="nli", kind="shared", path="snli", split="test", max_examples=5000)
    converted = load_source(source, None)
    drops = source_drops(source, converted)
    assert drops["source nli: neutral label"] == converted.drops["neutral label"] > 3000
    assert drops["source nli: short of max_examples 5000"] == 5000 - len(converted.examples)
    sampled = source.model_copy(update={"max_examples": 20})
    assert source_drops(sampled, load_source(sampled, None)) == {
        k: v for k, v in drops.items() if "short of" not in k
    }  # a sample asked for is no loss


def test_files_beir_and_run_sources(shared_data, tmp_path):
    rows = [make_example("old", "retrieval", "inst", f"q{i}", f"p{i}") for i in range(3)]
    write_parquet(rows, tmp_path / "ex.parquet", TrainingExample)
    write_jsonl(rows, tmp_path / "ex.jsonl")
    for kind in ("parquet", "jsonl"):
        got = load_source(
            DataSource(name="mine", kind=kind, path=str(tmp_path / f"ex.{kind}"), task_type="sts")
        ).examples
        assert [(e.task_name, e.task_type, e.query) for e in got] == [("mine", "sts", f"q{i}") for i in range(3)]
    beir = load_source(DataSource(name="db", kind="beir", path="dbpedia_entity_subset")).examples
    assert len(beir) == 880 and {e.max_relevance for e in beir} == {2.0}

    source = DataSource(name="synthetic", kind="run", path="synth")
    with pytest.raises(ValueError, match="none was given"):
        load_source(source, None)
    with pytest.raises(FileNotFoundError, match=r"stage 'synth' .* not complete \(missing\); run `embedforge synth`"):
        load_source(source, tmp_path / "run")
    stage = StageRun(tmp_path / "run", "synth", {}, "h")
    stage.start()
    stage.write_shard(0, rows, TrainingExample)
    stage.complete()
    assert [e.task_name for e in load_source(source, tmp_path / "run").examples] == ["synthetic"] * 3


def test_title_body_source_reads_a_document_collection(shared_data, tmp_path):
    corpus = DataSource(name="titles", kind="title_body", path="dbpedia_entity_subset/corpus.jsonl", max_examples=30)
    examples = load_source(corpus).examples
    assert len(examples) == 30 and {(e.task_name, e.task_type) for e in examples} == {("titles", "retrieval")}
    assert {e.instruction for e in examples} == {TITLE_BODY_INSTRUCTION}
    assert all(e.query and e.positive.strip() != e.query for e in examples)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Tides.txt").write_text("The sea rises and falls twice a day.")
    (folder / "Moon.txt").write_text("Moon")
    source = DataSource(name="notes", kind="title_body", path=str(folder), instruction="Find the note")
    converted = load_source(source)
    assert [(e.query, e.positive, e.instruction) for e in converted.examples] == [
        ("Tides", "The sea rises and falls twice a day.", "Find the note")
    ]
    assert source_drops(source, converted) == {"source notes: text is only the title": 1}


def test_cropped_source_cuts_one_query_from_each_sampled_document(shared_data):
    source = DataSource(
        name="crops", kind="cropped", path="trec_dl_msmarco_subset/corpus.jsonl", max_examples=25, crop_words=(4, 8)
    )
    examples = load_source(source, seed=3).examples
    assert len(examples) == 25 and {(e.task_name, e.instruction) for e in examples} == {("crops", BEIR_INSTRUCTION)}
    assert all(4 <= len(e.query.split()) <= 8 and e.query in " ".join(e.positive.split()) for e in examples)
    with pytest.raises(ValueError, match="crop_words"):
        DataSource(name="crops", kind="cropped", path="x.jsonl", crop_words=(9, 4))


def test_documents_kind_is_refused_with_a_reason():
    with pytest.raises(ValueError, match=r"kind 'documents'.*synth"):
        load_source(DataSource(name="docs", kind="documents", path="trec_dl_msmarco_subset/corpus.jsonl"))
