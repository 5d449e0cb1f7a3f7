"""Every shared dataset read in full: row counts match MANIFEST.md; malformed lines fail naming file and line."""

from __future__ import annotations

import json
import random
import shutil
import tracemalloc
from pathlib import Path

import pytest

from embedforge.data.beir import read_beir
from embedforge.data.delimited import DataFormatError
from embedforge.data.documents import iter_documents, read_documents, sample_documents
from embedforge.data.schema import ScoredPair
from embedforge.data.shared import RECORD_TYPES, SHARED_DATASETS, get_shared, read_shared

# (dataset, split) -> rows in MANIFEST.md (retrieval: corpus, queries, qrels; reranking: candidate pairs)
MANIFEST_ROWS = {
    ("stsb", "train"): 5749,
    ("stsb", "dev"): 1500,
    ("sick", "all"): 5000,
    ("sick_nli", "all"): 5000,
    ("snli", "dev"): 9842,
    ("snli", "test"): 9824,
    ("banking77", "train"): 10003,
    ("emotion", "train"): 16000,
    ("emotion", "val"): 2000,
    ("tweet_sentiment_extraction", "train"): 27480,
    ("amazon_counterfactual", "train"): 4018,
    ("amazon_counterfactual", "valid"): 335,
    ("amazon_counterfactual", "ext_train"): 8000,
    ("amazon_counterfactual", "ext_valid"): 666,
    ("mrpc", "train"): 4076,
    ("mrpc", "test"): 1725,
    ("twitter_semeval2015", "dev"): 4142,
    ("wikiqa", "train"): 8672,
    ("wikiqa", "dev"): 1130,
    ("trec_dl_msmarco_subset", "test"): (5000, 50, 4102),
    ("dbpedia_entity_subset", "test"): (5000, 50, 3709),
    # WikiQA's two files as one collection: distinct candidate sentences, questions, correct answers
    ("wikiqa_retrieval", "all"): (9270, 999, 1180),
}


@pytest.mark.parametrize(("name", "split"), sorted(MANIFEST_ROWS))
def test_reader_row_counts_match_manifest(shared_data, name, split):
    dataset = get_shared(name)
    records = dataset.read(split, shared_data)
    expected = MANIFEST_ROWS[(name, split)]
    if dataset.family == "retrieval":
        assert (len(records.corpus), len(records.queries), len(records.qrels)) == expected
        return
    assert all(isinstance(r, RECORD_TYPES[dataset.family]) for r in records)
    if dataset.family == "reranking":
        assert sum(len(g.positives) + len(g.negatives) for g in records) == expected
    else:
        assert len(records) == expected


def test_every_registered_dataset_and_split_is_counted():
    registered = {(n, s) for n, d in SHARED_DATASETS.items() for s in d.splits}
    assert registered - {("sick", "train"), ("sick", "trial"), ("sick_nli", "train"), ("sick_nli", "trial")} == set(
        MANIFEST_ROWS
    )


def test_record_contents(shared_data):
    stsb = read_shared("stsb", "train", shared_data)
    assert stsb[0] == ScoredPair("A plane is taking off.", "An air plane is taking off.", 5.0)
    assert {p.label for p in read_shared("snli", "dev", shared_data)} == {"entailment", "neutral", "contradiction"}
    assert len({t.label for t in read_shared("banking77", root=shared_data)}) == 77
    assert {t.label for t in read_shared("emotion", "val", shared_data)} == {
        "sadness",
        "joy",
        "love",
        "anger",
        "fear",
        "surprise",
    }
    assert {p.score for p in read_shared("mrpc", "train", shared_data)} == {0.0, 1.0}
    sick = read_shared("sick", "train", shared_data), read_shared("sick", "trial", shared_data)
    assert (len(sick[0]), len(sick[1])) == (4500, 500)
    ext = read_shared("amazon_counterfactual", "ext_train", shared_data)
    assert ext[0].text.startswith("They were right, the sound quality")  # the file's CSV-style quotes removed
    trec = read_shared("trec_dl_msmarco_subset", root=shared_data)
    assert {q.relevance for q in trec.qrels} == {1.0, 2.0, 3.0}
    assert trec.doc(trec.qrels[0].doc_id) is not None


def test_unknown_name_and_split_are_clear():
    with pytest.raises(ValueError, match="unknown shared dataset 'nope'"):
        read_shared("nope")
    with pytest.raises(ValueError, match="has no split 'validation'"):
        read_shared("stsb", "validation")


def _copy(shared_data: Path, tmp_path: Path, folder: str) -> Path:
    shutil.copytree(shared_data / folder, tmp_path / folder)
    return tmp_path / folder


@pytest.mark.parametrize(
    ("name", "relpath", "bad_line", "message"),
    [
        ("stsb", "sts-dev.csv", "main\tMSRvid\t2012\t1\t4.0\tonly one sentence\n", "expected 7 or 9"),
        ("stsb", "sts-dev.csv", "main\tMSRvid\t2012\t1\tfive\ta\tb\n", "score 'five' is not a number"),
        ("snli", "dev.tsv", "a premise\ta hypothesis\tmaybe\n", "NLI label 'maybe'"),
        ("mrpc", "train.tsv", "2\t1\t2\tone\ttwo\n", "label '2' is not 0 or 1"),
        ("banking77", "train.csv", "some text,not_a_category\n", "not in categories.json"),
        ("emotion", "val.txt", "no separator here\n", "expected 'text;label'"),
        ("wikiqa", "dev.tsv", "2\tanother question\tcandidate\t0\n", "different question"),
    ],
)
def test_malformed_line_names_file_and_line(shared_data, tmp_path, name, relpath, bad_line, message):
    folder = _copy(shared_data, tmp_path, get_shared(name).folder)
    path = folder / relpath
    text = path.read_text()
    path.chmod(0o644)
    path.write_text(text.rstrip("\n") + "\n" + bad_line)
    line = text.rstrip("\n").count("\n") + 2
    split = relpath.split(".")[0].removeprefix("sts-")
    with pytest.raises(DataFormatError, match=rf"{path.name}:{line}: .*{message}"):
        read_shared(name, split, tmp_path)


def test_beir_folder_reader_and_missing_files(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "body"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "question"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n")
    beir = read_beir(tmp_path)
    assert beir.doc("d1").title == "T" and beir.qrels[0].relevance == 2.0
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "question"}\n{"text": "no id"}\n')
    with pytest.raises(DataFormatError, match=r"queries.jsonl:2: missing '_id'"):
        read_beir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"missing .*dev\.tsv"):
        read_beir(tmp_path, "dev")


def test_documents_from_jsonl_parquet_and_text_folder(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"id": 7, "title": "Seven", "text": "the seventh"}\n{"text": "no id"}\n')
    assert [(d.doc_id, d.title) for d in read_documents(jsonl)] == [("7", "Seven"), ("2", "")]
    pq.write_table(pa.Table.from_pylist([{"doc_id": "a", "text": "alpha"}]), tmp_path / "docs.parquet")
    assert read_documents(tmp_path / "docs.parquet")[0].text == "alpha"
    folder = tmp_path / "txt"
    (folder / "sub").mkdir(parents=True)
    (folder / "one.txt").write_text("first")
    (folder / "sub" / "two.txt").write_text("second")
    assert [(d.doc_id, d.title, d.text) for d in read_documents(folder)] == [
        ("one.txt", "one", "first"),
        ("sub/two.txt", "two", "second"),
    ]
    jsonl.write_text('{"id": 1, "text": "ok"}\n{"id": 2, "text": ""}\n')
    with pytest.raises(DataFormatError, match=r"docs.jsonl:2: missing or empty 'text'"):
        read_documents(jsonl)
    jsonl.write_text('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n')
    with pytest.raises(DataFormatError, match="duplicate document id '1'"):
        read_documents(jsonl)
    (tmp_path / "docs.csv").write_text("x")
    with pytest.raises(ValueError, match=r"\.jsonl file, a \.parquet file or a folder"):
        read_documents(tmp_path / "docs.csv")


def _write_collection(path, n, words=40):
    with path.open("w") as fh:
        for i in range(n):
            fh.write(json.dumps({"_id": f"d{i}", "title": f"T{i}", "text": f"passage {i} " + "word " * words}) + "\n")


def test_sampled_documents_are_the_seeded_draw_in_collection_order(tmp_path):
    path = tmp_path / "docs.jsonl"
    _write_collection(path, 500)
    total, sample = sample_documents(path, 37, "0:documents")
    everything = read_documents(path)
    drawn = sorted(random.Random("0:documents").sample(range(500), 37))
    assert total == 500
    assert [d.doc_id for d in sample] == [everything[i].doc_id for i in drawn]
    assert sample_documents(path, None, "0:documents") == (500, everything)
    assert sample_documents(path, 900, "0:documents") == (500, everything)


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_sampling_a_collection_does_not_hold_it_in_memory(tmp_path):
    path = tmp_path / "docs.jsonl"
    _write_collection(path, 10_000, words=300)  # passages of 1.5 KB, 15 MB in all
    (total, sample), sampling = _peak_bytes(lambda: sample_documents(path, 10, "0:documents"))
    everything, reading = _peak_bytes(lambda: read_documents(path))
    assert (total, len(sample), len(everything)) == (10_000, 10, 10_000)
    assert sampling < reading / 5  # the ids seen so far, not the documents


def test_document_stream_fails_where_the_bad_record_is(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": "also fine"}\nnot json\n')
    stream = iter_documents(path)
    assert [next(stream).doc_id, next(stream).doc_id] == ["a", "b"]
    with pytest.raises(ValueError, match=r"docs.jsonl:3: invalid JSON"):
        next(stream)


def test_wikiqa_as_retrieval_keeps_each_questions_answers(shared_data):
    collection = read_shared("wikiqa_retrieval", root=shared_data)
    groups = {f"{part}-{g.query_id}": g for part in ("train", "dev") for g in read_shared("wikiqa", part, shared_data)}
    relevant: dict[str, set[str]] = {}
    for qrel in collection.qrels:
        relevant.setdefault(qrel.query_id, set()).add(collection.doc(qrel.doc_id).text)
    assert {q.query_id for q in collection.queries} == set(relevant)
    for query in collection.queries:
        assert groups[query.query_id].query == query.text
        assert relevant[query.query_id] == set(groups[query.query_id].positives)
    assert len({d.text for d in collection.corpus}) == len(collection.corpus)  # each sentence once
