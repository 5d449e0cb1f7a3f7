"""JSON schemas for guided decoding, with every string and list bounded so outputs fit the token budget.

Guided decoding is what makes a small generator usable at all (environment.md: greedy decoding of a 135M model
without a schema loops); bounding `maxLength` keeps outputs from being cut by max_tokens, which NV-Embed's
pipeline (seed 000, 4.3) handles by discarding malformed generations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """Bounds for generated texts (config synth.min_chars / max_query_chars / max_document_chars /
    max_copied_words)."""

    min_chars: int
    max_query: int
    max_document: int
    num_negatives: int = 4
    max_copied_words: int | None = None  # queries mode: a query repeating this many of its passage's words in a row


def _text(min_len: int, max_len: int) -> dict[str, Any]:
    return {"type": "string", "minLength": min_len, "maxLength": max_len}


def _texts(count: int, min_len: int, max_len: int) -> dict[str, Any]:
    return {"type": "array", "items": _text(min_len, max_len), "minItems": count, "maxItems": count}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def output_schema(kind: str, limits: Limits) -> dict[str, Any]:
    """The schema a generation of `kind` (retrieval, sts, classification, grounded) must follow."""
    lo, q, d, k = limits.min_chars, limits.max_query, limits.max_document, limits.num_negatives
    if kind == "retrieval":
        return _object(
            {"user_query": _text(lo, q), "positive_document": _text(lo, d), "hard_negative_documents": _texts(k, lo, d)}
        )
    if kind == "grounded":
        return _object({"user_query": _text(lo, q), "hard_negative_documents": _texts(k, lo, d)})
    if kind == "sts":
        return _object(
            {"sentence": _text(lo, q), "similar_sentence": _text(lo, q), "hard_negative_sentences": _texts(k, lo, q)}
        )
    if kind == "classification":
        return _object({"input_text": _text(lo, d), "label": _text(1, 60), "misleading_label": _text(1, 60)})
    raise ValueError(f"unknown output kind {kind!r}")


def brainstorm_schema(count: int, max_task_chars: int) -> dict[str, Any]:
    """Step 1 of two-step prompting: a list of up to `count` one-sentence task definitions."""
    tasks = {"type": "array", "items": _text(10, max_task_chars), "minItems": 1, "maxItems": count}
    return _object({"tasks": tasks})


def judge_schema(note_chars: int) -> dict[str, Any]:
    """WildBench 3.3: strengths and weaknesses before the score, the score an integer 1-10."""
    return _object(
        {
            "strengths": _text(1, note_chars),
            "weaknesses": _text(1, note_chars),
            "score": {"type": "integer", "minimum": 1, "maximum": 10},
        }
    )
