"""The parser/validator on a corpus of malformed generator outputs, and judge-score parsing."""

from __future__ import annotations

import json

import pytest

from embedforge.synth.schemas import Limits
from embedforge.synth.validate import (
    Rejected,
    extract_json,
    leaves_room_for_query,
    parse_example,
    parse_judge,
    parse_tasks,
    rescale,
)

LIMITS = Limits(min_chars=3, max_query=80, max_document=200, num_negatives=4)
NEGATIVES = [
    "Drip coffee makers heat water and pass it through ground beans by gravity.",
    "Cold brew steeps coarse grounds in cold water for many hours.",
    "Tea leaves are graded by size, from whole leaf down to dust.",
    "The history of the coffeehouse in seventeenth-century London.",
]
GOOD = {
    "user_query": "how does an espresso machine work",
    "positive_document": "An espresso machine forces hot water at about nine bar through finely ground coffee.",
    "hard_negative_documents": NEGATIVES,
}


def _with(**changes: object) -> str:
    return json.dumps({**GOOD, **changes})


def _reason(kind: str, text: str, document: str | None = None) -> str:
    with pytest.raises(Rejected) as err:
        parse_example(kind, text, LIMITS, document=document)
    return err.value.reason


def test_good_retrieval_keeps_order_of_negatives() -> None:
    cand = parse_example("retrieval", json.dumps(GOOD), LIMITS)
    assert cand.query == GOOD["user_query"]
    assert list(cand.negatives) == NEGATIVES


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (json.dumps(GOOD)[:-40], "invalid_json"),  # truncated mid-string
        (json.dumps(GOOD)[:-1], "invalid_json"),  # missing closing brace
        ("", "empty_output"),
        ("   \n ", "empty_output"),
        ("Sure! I cannot do that.", "invalid_json"),
        ("[1, 2, 3]", "wrong_type"),
        (_with(user_query=42), "wrong_type"),
        (_with(positive_document=["a list", "of strings"]), "wrong_type"),
        (_with(hard_negative_documents="one long string"), "wrong_type"),
        (_with(hard_negative_documents=[*NEGATIVES[:3], None]), "wrong_type"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "positive_document"}), "missing_field"),
        (_with(user_query=""), "empty_text"),
        (_with(positive_document=" \t\n "), "empty_text"),
        (_with(hard_negative_documents=[*NEGATIVES[:3], ""]), "empty_text"),
        (_with(user_query="ab"), "too_short"),
        (_with(positive_document="x" * 100_000), "too_long"),
        (_with(user_query="why " * 10_000), "too_long"),
        (_with(hard_negative_documents=NEGATIVES[:3]), "wrong_negative_count"),
        (_with(hard_negative_documents=[*NEGATIVES, "a fifth one here"]), "wrong_negative_count"),
        (_with(hard_negative_documents=[NEGATIVES[0], NEGATIVES[0].upper(), *NEGATIVES[2:]]), "duplicate_negatives"),
        (_with(hard_negative_documents=[GOOD["positive_document"], *NEGATIVES[1:]]), "negative_equals_positive"),
        (_with(positive_document=GOOD["user_query"]), "document_equals_query"),
        (
            _with(
                user_query="what pressure does an espresso machine use",
                positive_document="Note: what pressure does an espresso machine use? About nine bar.",
            ),
            "query_copied",
        ),
        (_with(user_query="caf\ufffd au lait"), "bad_unicode"),
    ],
)
def test_malformed_outputs_are_rejected_with_reason(text: str, reason: str) -> None:
    assert _reason("retrieval", text) == reason


def test_text_around_json_is_recovered() -> None:
    text = "Here is the example you asked for:\n```json\n" + json.dumps(GOOD, indent=2) + "\n```\nHope it helps {!}"
    assert parse_example("retrieval", text, LIMITS).positive == GOOD["positive_document"]


def test_braces_inside_strings_do_not_confuse_extraction() -> None:
    obj = {**GOOD, "positive_document": "Use the {dict} literal; a '}' closes it, and \"{\" opens it."}
    assert extract_json("prefix " + json.dumps(obj) + " suffix") == obj


def test_truncated_json_is_not_rescued_by_an_inner_object() -> None:
    text = '{"user_query": "{} a query", "positive_document": "cut off here'
    assert _reason("retrieval", text) == "invalid_json"


def test_unicode_is_kept_normalised_and_control_characters_removed() -> None:
    decomposed = "cafe\u0301 cre\u0300me brûlée 東京の天気 😀"
    cand = parse_example("retrieval", _with(user_query=decomposed + "\x00\x07"), LIMITS)
    assert cand.query == "café crème brûlée 東京の天気 😀"


def test_sts_and_classification_kinds() -> None:
    sts = {
        "sentence": "The cat sat on the mat.",
        "similar_sentence": "A cat was sitting on the rug.",
        "hard_negative_sentences": [
            "The dog sat on the mat.",
            "The cat ran off the mat.",
            "Mats are sold in shops.",
            "It rained all day.",
        ],
    }
    assert parse_example("sts", json.dumps(sts), LIMITS).positive == sts["similar_sentence"]
    same = {**sts, "similar_sentence": "the cat  sat on the MAT."}
    assert _reason("sts", json.dumps(same)) == "document_equals_query"
    cls = {
        "input_text": "The battery died after two days, very disappointed.",
        "label": "negative",
        "misleading_label": "neutral",
    }
    cand = parse_example("classification", json.dumps(cls), LIMITS)
    assert (cand.positive, cand.negatives) == ("negative", ("neutral",))
    assert _reason("classification", json.dumps({**cls, "misleading_label": "Negative"})) == "same_labels"
    leaked = {**cls, "input_text": "Negative experience: the battery died after two days."}
    assert _reason("classification", json.dumps(leaked)) == "label_in_text"


def test_grounded_kind_takes_the_users_document_as_positive() -> None:
    out = json.dumps({"user_query": "espresso pressure", "hard_negative_documents": NEGATIVES})
    doc = "A long user document " * 50
    assert parse_example("grounded", out, LIMITS, document=doc).positive == doc.strip()
    with pytest.raises(ValueError, match="needs the document"):
        parse_example("grounded", out, LIMITS)


def test_brainstorm_tasks_are_cleaned_and_deduplicated() -> None:
    text = json.dumps(
        {
            "tasks": [
                "Given a recipe name, find recipes",
                "given a recipe  name, find RECIPES",
                3,
                "",
                "x",
                "Given a law, retrieve court cases citing it",
            ]
        }
    )
    assert parse_tasks(text, 100) == [
        "Given a recipe name, find recipes",
        "Given a law, retrieve court cases citing it",
    ]
    with pytest.raises(Rejected, match="no_tasks"):
        parse_tasks(json.dumps({"tasks": ["", 1]}), 100)


@pytest.mark.parametrize(
    ("score", "expected"),
    [(7, 7), (1, 1), (10, 10), (8.0, 8), ("7", 7), ("7/10", 7), (" 9 / 10 ", 9), ("6.0", 6)],
)
def test_judge_scores_parse(score: object, expected: int) -> None:
    verdict = parse_judge(json.dumps({"strengths": "clear", "weaknesses": "short", "score": score}))
    assert verdict.score == expected
    assert verdict.rescaled == (expected - 5) * 2


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"strengths": "ok", "score": 11}', "judge_score_out_of_range"),
        ('{"strengths": "ok", "score": 0}', "judge_score_out_of_range"),
        ('{"strengths": "ok", "score": 7.5}', "judge_bad_score"),
        ('{"strengths": "ok", "score": "seven"}', "judge_bad_score"),
        ('{"strengths": "ok", "score": true}', "judge_bad_score"),
        ('{"strengths": "ok", "score": null}', "judge_bad_score"),
        ('{"strengths": "ok"}', "judge_missing_score"),
        ('{"strengths": "ok", "sco', "judge_invalid_json"),
    ],
)
def test_bad_judge_outputs_are_rejected(text: str, reason: str) -> None:
    with pytest.raises(Rejected) as err:
        parse_judge(text)
    assert err.value.reason == reason


def test_rescale_follows_wildbench() -> None:
    assert [rescale(s) for s in (1, 5, 6, 10)] == [-8, 0, 2, 10]


def test_a_task_must_leave_a_quarter_of_the_query_length_for_the_query(smollm2_dir):
    from embedforge.config.model import InstructionConfig
    from embedforge.model.backbone import load_tokenizer
    from embedforge.model.instructions import render_prefix
    from embedforge.model.tokenization import framing_tokens

    tokenizer = load_tokenizer(smollm2_dir)

    def tokens(task: str) -> int:
        return framing_tokens(tokenizer, render_prefix(InstructionConfig(), task))

    # a task SmolLM2-135M brainstormed in the 2026-11-24 demo: 146 characters that left no room within 64 tokens
    symbols = (
        ",<KEY>','NONCLARATING','PROFICER']}SyntaxError in `json::dumps` error {0xA2B5E6AB|NAVIGABLE}, but I edited "
        "you for better grammar using maketrans="
    )
    plain = "Given a question, retrieve Wikipedia passages that answer the question"
    assert not leaves_room_for_query(tokens(symbols), max_query_length=64)
    assert leaves_room_for_query(tokens(plain), max_query_length=64)
    assert leaves_room_for_query(48, 64) and not leaves_room_for_query(49, 64)
