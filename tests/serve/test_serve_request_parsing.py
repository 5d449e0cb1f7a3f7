"""Request parsing details the live table does not reach: truncation mode, defaults, extensions, dimensions."""

from __future__ import annotations

import numpy as np

from embedforge.config.serve import LimitsConfig
from embedforge.embeddings.matryoshka import truncate_dimensions
from embedforge.serve.request import parse_request


def parse(payload, **limits):
    return parse_request(
        payload, model_name="m", dimension=8, default_input_type="document", limits=LimitsConfig(**limits)
    )


def test_truncate_mode_cuts_long_inputs_to_the_character_limit():
    req = parse({"model": "m", "input": ["abcdefghij", "xyz"]}, max_chars_per_input=4, on_too_long="truncate")
    assert req.texts == ["abcd", "xyz"] and req.truncate


def test_a_too_long_input_is_an_error_unless_the_request_asks_for_truncation():
    """TEI's `truncate`: an error by default, truncation on request, and the request overrides the config default."""
    import pytest

    from embedforge.serve.errors import APIError

    with pytest.raises(APIError) as err:
        parse({"model": "m", "input": ["abcdefghij"]}, max_chars_per_input=4)
    assert err.value.status == 413 and "limit is 4" in err.value.message
    assert parse({"model": "m", "input": ["abcdefghij"], "truncate": True}, max_chars_per_input=4).texts == ["abcd"]
    with pytest.raises(APIError):
        parse({"model": "m", "input": ["abcdefghij"], "truncate": False}, max_chars_per_input=4, on_too_long="truncate")
    with pytest.raises(APIError, match="`truncate` must be true or false"):
        parse({"model": "m", "input": ["a"], "truncate": "yes"})


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


def test_demonstrations_are_checked():
    import pytest

    from embedforge.serve.errors import APIError

    demo = {"query": "q", "document": "d"}
    req = parse({"model": "m", "input": ["x"], "input_type": "query", "demonstrations": [demo, demo]})
    assert req.demonstrations == (("q", "d"), ("q", "d"))
    bad = [
        ({"input_type": "document", "demonstrations": [demo]}, 422, "apply to queries"),
        ({"input_type": "query", "demonstrations": {"query": "q"}}, 422, "must be a list"),
        ({"input_type": "query", "demonstrations": [{"query": "q"}]}, 422, "exactly `query` and `document`"),
        ({"input_type": "query", "demonstrations": [{"query": "q", "document": " "}]}, 422, "non-empty string"),
        ({"input_type": "query", "demonstrations": [demo] * 17}, 413, "the limit is 16"),
        ({"input_type": "query", "demonstrations": [{"query": "q" * 9000, "document": "d"}]}, 413, "characters"),
    ]
    for extra, status, message in bad:
        with pytest.raises(APIError) as err:
            parse({"model": "m", "input": ["x"], **extra})
        assert err.value.status == status and message in err.value.message, extra
