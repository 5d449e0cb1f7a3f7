"""benchmarks/synth.py counts an output as schema-valid when its JSON meets the schema the decoder was given."""

from __future__ import annotations

import pytest

SCHEMA = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 3}, "negatives": {"type": "array", "minItems": 2}},
    "required": ["query", "negatives"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("synth")


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ('{"query": " + ", "negatives": ["a", "b"]}', True),  # meets minLength 3; the validator's cleaning drops it
        ('Here it is: {"query": "abc", "negatives": [1, 2]} done', True),
        ('{"query": "ab", "negatives": ["a", "b"]}', False),
        ('{"query": "abc", "negatives": ["a"]}', False),
        ('{"query": "abc", "negatives": ["a", "b"], "extra": 1}', False),
        ('{"query": 5, "negatives": ["a", "b"]}', False),
        ('{"query": "abc", "negatives": ["a", ', False),
        ("", False),
    ],
)
def test_schema_valid_is_the_decoder_schema_not_the_cleaning(bench, text, valid):
    assert bench.schema_valid(text, SCHEMA) is valid
