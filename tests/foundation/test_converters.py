"""Every converter on hand-made inputs: what becomes a positive, what a negative, what is dropped and why."""

from __future__ import annotations

import json

import pytest

from embedforge.data.beir import BeirDataset
from embedforge.data.converters import (
    Converted,
    cropped_to_examples,
    deduplicate,
    example_id,
    groups_to_examples,
    labelled_to_examples,
    make_example,
    nli_to_examples,
    qrels_to_examples,
    similar_pairs_to_examples,
    title_body_to_examples,
)
from embedforge.data.schema import CorpusDocument, LabelledText, NliPair, Qrel, Query, RerankingGroup, ScoredPair


def test_nli_entailment_positive_contradiction_negative_neutral_dropped():
    pairs = [
        NliPair("A man plays guitar.", "A person makes music.", "entailment"),
        NliPair("A man plays guitar.", "The man is asleep.", "contradiction"),
        NliPair("A man plays guitar.", "The man is famous.", "neutral"),
        NliPair("A dog runs.", "An animal moves.", "entailment"),
        NliPair("A cat sits.", "The cat is running.", "contradiction"),  # no entailment: dropped
    ]
    out = nli_to_examples(pairs, "snli", "Given a premise, retrieve an entailed hypothesis")
    by_query = {e.query: e for e in out.examples}
    assert set(by_query) == {"A man plays guitar.", "A dog runs."}
    guitar = by_query["A man plays guitar."]
    assert guitar.positive == "A person makes music."
    assert guitar.negatives == ["The man is asleep."]
    assert by_query["A dog runs."].negatives == []
    assert out.drops == {"neutral label": 1, "premise without an entailed hypothesis": 1}
    assert json.loads(guitar.provenance)["paper"] == "LGAI 3"
    assert guitar.task_type == "retrieval" and guitar.task_name == "snli"


def test_nli_unknown_label_fails_naming_it():
    with pytest.raises(ValueError, match="'maybe'"):
        nli_to_examples([NliPair("a", "b", "maybe")], "snli", "")


def test_sts_pairs_at_or_above_four_give_both_directions():
    pairs = [ScoredPair("a cat", "a kitten", 4.0), ScoredPair("a car", "a bus", 3.99), ScoredPair("x", "x", 5.0)]
    out = similar_pairs_to_examples(pairs, "stsb", "Retrieve semantically similar text.")
    assert [(e.query, e.positive) for e in out.examples] == [("a cat", "a kitten"), ("a kitten", "a cat")]
    assert all(e.task_type == "sts" and e.negatives == [] for e in out.examples)
    assert out.drops == {"score below 4": 1, "identical texts": 1}


def test_paraphrase_labels_use_threshold_one():
    pairs = [ScoredPair("p1", "p2", 1.0), ScoredPair("n1", "n2", 0.0)]
    out = similar_pairs_to_examples(pairs, "mrpc", "", threshold=1.0, task_type="pair")
    assert {(e.query, e.positive) for e in out.examples} == {("p1", "p2"), ("p2", "p1")}
    assert out.drops == {"score below 1": 1}


def test_example_based_classification_positive_same_class_negatives_other_classes():
    texts = [LabelledText(f"{label} text {i}", label) for label in ("pos", "neg", "neu") for i in range(4)]
    texts.append(LabelledText("lonely", "rare"))  # a class with one example cannot give a positive
    out = labelled_to_examples(texts, "sentiment", "Classify the sentiment", num_negatives=3, seed=1)
    assert len(out.examples) == 12
    assert out.drops == {"class with a single example": 1}
    for e in out.examples:
        label = e.query.split()[0]
        assert e.positive != e.query and e.positive.split()[0] == label
        assert len(e.negatives) == 3
        assert all(n.split()[0] != label for n in e.negatives)
        assert json.loads(e.provenance)["label"] == label
    again = labelled_to_examples(texts, "sentiment", "Classify the sentiment", num_negatives=3, seed=1)
    assert [e.to_row() for e in again.examples] == [e.to_row() for e in out.examples]


def test_example_based_needs_two_classes():
    with pytest.raises(ValueError, match="at least 2 classes"):
        labelled_to_examples([LabelledText("a", "x"), LabelledText("b", "x")], "t", "", num_negatives=1)


def test_multi_positive_query_splits_and_deduplicates():
    groups = [
        RerankingGroup("q1", "how are caves formed?", ["melting ice", "water erosion", "melting ice"], ["a map"]),
        RerankingGroup("q2", "who wrote it?", [], ["nobody"]),
    ]
    out = groups_to_examples(groups, "wikiqa", "Given a question, retrieve passages")
    assert [e.positive for e in out.examples] == ["melting ice", "water erosion"]
    assert all(e.negatives == ["a map"] for e in out.examples)
    assert out.drops == {"duplicate (query, positive)": 1, "query without a positive": 1}
    assert len({e.id for e in out.examples}) == 2


def test_qrels_give_graded_relevance_and_skip_grade_zero():
    beir = BeirDataset(
        corpus=[CorpusDocument("d1", "first passage", "Title"), CorpusDocument("d2", "second passage")],
        queries=[Query("q1", "what is it")],
        qrels=[Qrel("q1", "d1", 2), Qrel("q1", "d2", 1), Qrel("q1", "d3", 1), Qrel("q1", "d2", 0), Qrel("q9", "d1", 1)],
        name="toy",
    )
    out = qrels_to_examples(beir, "toy", "Retrieve")
    assert [(e.positive, e.relevance, e.max_relevance) for e in out.examples] == [
        ("Title\nfirst passage", 2.0, 2.0),
        ("second passage", 1.0, 2.0),
    ]
    assert out.drops == {"qrel for an unknown document id": 1, "relevance 0": 1, "qrel for an unknown query id": 1}


def test_ids_are_deterministic_and_content_based():
    a = make_example("t", "retrieval", "inst", "q", "p")
    assert a.id == example_id("t", "inst", "q", "p") == make_example("t", "retrieval", "inst", "q", "p").id
    assert a.id != make_example("t", "retrieval", "other", "q", "p").id
    out = deduplicate(Converted(examples=[a, make_example("t", "retrieval", "inst", "q", "p")]))
    assert len(out.examples) == 1 and out.drops == {"duplicate (query, positive)": 1}


def test_title_body_title_is_the_query_text_the_positive_untitled_dropped():
    docs = [
        CorpusDocument("a", "Ada Lovelace was an English mathematician.", "Ada Lovelace"),
        CorpusDocument("b", "A text nobody titled.", ""),
        CorpusDocument("c", "Only a title", "Only a title"),
        CorpusDocument("d", "Ada Lovelace was an English mathematician.", "Ada Lovelace"),  # a copy
    ]
    out = title_body_to_examples(docs, "wiki", "Given a title, retrieve the passage it heads")
    assert [(e.query, e.positive, e.negatives, e.task_type) for e in out.examples] == [
        ("Ada Lovelace", "Ada Lovelace was an English mathematician.", [], "retrieval")
    ]
    assert out.drops == {"document without a title": 1, "text is only the title": 1, "duplicate (query, positive)": 1}
    assert json.loads(out.examples[0].provenance) == {
        "source": "wiki",
        "converter": "title_body",
        "paper": "NV-Embed 4.2",
        "doc_id": "a",
    }


def test_cropped_query_is_a_seeded_span_of_its_document_shorter_than_it():
    words = "the tide rises and falls twice a day because the moon pulls the sea"
    docs = [
        CorpusDocument("a", words, "Tides"),
        CorpusDocument("b", "too short text", ""),
        CorpusDocument("c", "one two three four five", ""),
    ]
    out = cropped_to_examples(docs, "crops", "Find it", (3, 6), seed=7)
    by_doc = {json.loads(e.provenance)["doc_id"]: e for e in out.examples}
    assert set(by_doc) == {"a", "c"} and out.drops == {"document of 3 words or fewer": 1}
    tides = by_doc["a"]
    assert tides.positive == "Tides " + words and tides.instruction == "Find it"
    assert 3 <= len(tides.query.split()) <= 6 and f" {tides.query} " in f" {words} "
    assert len(by_doc["c"].query.split()) in (3, 4)  # never the whole five-word document
    again = cropped_to_examples(docs, "crops", "Find it", (3, 6), seed=7).examples
    assert [e.query for e in again] == [e.query for e in out.examples]
    spans = {e.query for s in range(20) for e in cropped_to_examples(docs[:1], "crops", "Find it", (3, 6), s).examples}
    assert len(spans) > 5  # the seed moves the span
