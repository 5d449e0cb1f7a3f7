"""Every record type round-trips through Parquet and JSONL, and Ray Data reads what we write with named fields."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from embedforge.data.io import read_jsonl, read_parquet, write_jsonl, write_parquet
from embedforge.data.schema import (
    SCHEMAS,
    CorpusDocument,
    LabelledText,
    NliPair,
    Qrel,
    Query,
    RerankingGroup,
    ScoredPair,
    TrainingExample,
)

SAMPLES = {
    TrainingExample: [
        TrainingExample(
            id="t-1",
            task_name="wikiqa",
            task_type="retrieval",
            instruction="Given a question, retrieve",
            query="how are caves formed?",
            positive="melting ice",
            negatives=["a map", 'a "quoted"\ttab'],
            negative_levels=[1, 4],
            positive_score=0.875,
            negative_scores=[0.5, 0.25],
            relevance=2.0,
            max_relevance=3.0,
            provenance=json.dumps({"source": "wikiqa", "mining": {"margin": 0.95}}),
        ),
        TrainingExample(id="t-2", task_name="stsb", task_type="sts", instruction="", query="a", positive="b"),
    ],
    CorpusDocument: [CorpusDocument("d1", "text ü", "Title"), CorpusDocument("d2", "plain")],
    Query: [Query("q1", "what?")],
    Qrel: [Qrel("q1", "d1", 2.0)],
    ScoredPair: [ScoredPair("a", "b", 4.5)],
    LabelledText: [LabelledText("hello", "greeting")],
    NliPair: [NliPair("p", "h", "entailment")],
    RerankingGroup: [RerankingGroup("q", "query", ["yes"], ["no", "never"])],
}


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_parquet_and_jsonl_round_trip(tmp_path, cls):
    records = SAMPLES[cls]
    assert write_parquet(records, tmp_path / "x.parquet", cls) == len(records)
    assert pq.read_schema(tmp_path / "x.parquet").names == SCHEMAS[cls].names
    assert read_parquet(tmp_path / "x.parquet", cls) == records
    assert write_jsonl(records, tmp_path / "x.jsonl") == len(records)
    assert read_jsonl(tmp_path / "x.jsonl", cls) == records


def test_every_schema_record_has_a_sample():
    assert set(SAMPLES) == set(SCHEMAS)


def test_bad_records_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="task_type 'web'"):
        TrainingExample(id="x", task_name="t", task_type="web", instruction="", query="q", positive="p")
    with pytest.raises(ValueError, match="1 negative_levels for 2 negatives"):
        TrainingExample(
            id="x",
            task_name="t",
            task_type="sts",
            instruction="",
            query="q",
            positive="p",
            negatives=["a", "b"],
            negative_levels=[1],
        )
    (tmp_path / "bad.jsonl").write_text('{"text": "a", "label": "b"}\n{"text": "a"\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: invalid JSON"):
        read_jsonl(tmp_path / "bad.jsonl", LabelledText)


def test_ray_data_reads_what_we_write(ray_cluster, tmp_path):
    examples = SAMPLES[TrainingExample]
    folder = tmp_path / "shards"
    write_parquet(examples[:1], folder / "part-00000.parquet", TrainingExample)
    write_parquet(examples[1:], folder / "part-00001.parquet", TrainingExample)
    ds = ray_cluster.data.read_parquet(str(folder))
    assert ds.schema().names == SCHEMAS[TrainingExample].names
    rows = sorted(ds.take_all(), key=lambda r: r["id"])
    assert [TrainingExample.from_row(r) for r in rows] == examples

    # and what Ray Data writes back comes through our reader unchanged
    out = tmp_path / "ray_out"
    ds.write_parquet(str(out))
    assert sorted(read_parquet(out, TrainingExample), key=lambda e: e.id) == examples
