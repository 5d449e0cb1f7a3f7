"""Property-based fuzzing of what a client controls: the body and the headers of `/v1/embeddings`.

Whatever the bytes, parsing ends in a request or a 4xx `APIError`, never another exception (which the server would
answer with a 500). The pure parser takes many examples; the live deployment takes fewer over real HTTP and must
answer each with a 2xx or a 4xx JSON error.
"""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from embedforge.config.serve import LimitsConfig
from embedforge.serve.auth import KeyChecker, _digest
from embedforge.serve.errors import APIError
from embedforge.serve.request import EmbeddingRequest, parse_request, read_json_body

MODEL = "minilm-test"  # conftest.MODEL_NAME
FIELDS = ["input", "model", "encoding_format", "dimensions", "user", "input_type", "instruction", "truncate",
          "demonstrations", "query", "document"]  # fmt: skip

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=8), inner),
    max_leaves=25,
)
# objects shaped like requests (known fields, the served model most of the time), so the checks past the first
# fields are reached too
requests = st.fixed_dictionaries(
    {"model": st.sampled_from([MODEL, MODEL, ""]) | json_values},
    optional={name: json_values for name in FIELDS if name != "model"},
)


def _bodies() -> st.SearchStrategy[bytes]:
    as_json = (requests | json_values).map(lambda value: json.dumps(value).encode())
    return as_json | st.binary(max_size=200) | as_json.flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n]))


content_types = st.sampled_from(["application/json", "application/json; charset=utf-8", "text/plain", ""]) | st.text(
    max_size=30
)


def parse(raw: bytes, content_type: str | None) -> EmbeddingRequest:
    payload = read_json_body(raw, content_type, 65536)
    return parse_request(payload, model_name=MODEL, dimension=384, default_input_type="document", limits=LimitsConfig())


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=_bodies(), content_type=st.none() | content_types)
def test_any_body_parses_or_is_a_4xx(raw, content_type):
    try:
        request = parse(raw, content_type)
    except APIError as err:
        assert 400 <= err.status < 500
        assert err.body()["error"]["message"]
        return
    assert isinstance(request, EmbeddingRequest) and request.texts


@settings(max_examples=300, deadline=None)
@given(authorization=st.none() | st.text(max_size=60) | st.sampled_from(["Bearer ", "Bearer  k", "bearer k"]))
def test_any_authorization_header_is_accepted_or_a_401(authorization):
    checker = KeyChecker([_digest("k")])
    try:
        checker.check(authorization)
    except APIError as err:
        assert err.status == 401
        return
    assert authorization is not None and authorization.split()[-1] == "k"


# what a client can send: HTTP field values carry no leading or trailing whitespace (RFC 9110 5.5), so httpx refuses
# a value such as " " before it reaches the endpoint
sendable = content_types.filter(lambda v: v.isascii() and v.isprintable() and v == v.strip())


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=_bodies(), content_type=sendable)
def test_the_live_endpoint_answers_every_body_with_a_2xx_or_a_4xx(served, raw, content_type):
    headers = {"Authorization": f"Bearer {served.key}", "Content-Type": content_type}
    resp = httpx.post(served.url + "/v1/embeddings", content=raw, headers=headers, timeout=60)
    assert resp.status_code < 500, resp.text
    if resp.status_code >= 400:
        assert resp.json()["error"]["message"]
