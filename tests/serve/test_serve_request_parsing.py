"""Request parsing details the live table does not reach: truncation mode, defaults, extensions, dimensions."""

from __future__ import annotations

import numpy as np

from embedforge.config.serve import LimitsConfig
from embedforge.serve.request import parse_request
from embedforge.serve.service import truncate_dimensions


def parse(payload, **limits):
    return parse_request(
        payload, model_name="m", dimension=8, default_input_type="document", limits=LimitsConfig(**limits)
    )


def test_truncate_mode_cuts_long_inputs_to_the_character_limit():
    req = parse({"model": "m", "input": ["abcdefghij", "xyz"]}, max_chars_per_input=4, on_too_long="truncate")
    assert req.texts == ["abcd", "xyz"]


def test_defaults_and_extensions():
    req = parse({"model": "m", "input": "hello"})
    assert (req.texts, req.encoding_format, req.dimensions, req.input_type, req.instruction) == (
        ["hello"],
        "float",
        None,
        "document",
        None,
    )
    req = parse(
        {
            "model": "m",
            "input": ["q"],
            "input_type": "query",
            "instruction": "Find answers",
            "dimensions": 4,
            "encoding_format": "base64",
            "user": "u1",
        }
    )
    assert (req.input_type, req.instruction, req.dimensions, req.encoding_format) == (
        "query",
        "Find answers",
        4,
        "base64",
    )


def test_truncate_dimensions_renormalises():
    vectors = np.array([[3.0, 4.0, 12.0], [1.0, 0.0, 0.0]], dtype=np.float32)
    out = truncate_dimensions(vectors, 2)
    np.testing.assert_allclose(out, [[0.6, 0.8], [1.0, 0.0]], rtol=1e-6)
    assert truncate_dimensions(vectors, None) is vectors
