"""A table of bad requests against the live deployment: each gets its status and a JSON error naming the problem.

Limits in the test deployment (conftest): 32 inputs, 2000 characters and 64 tokens per input (reject), 64 KiB body.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import httpx
import pytest

MODEL = "minilm-test"  # conftest.MODEL_NAME
WRONG_KEY = "wrong-key-Zr81"
DEFAULT = object()  # keep the default header


def ok(**fields):
    return {"model": MODEL, "input": "fine", **fields}


# (id, method, path, body: dict | list | bytes, headers, status, substring of error.message)
CASES = [
    ("empty-list", "POST", "/v1/embeddings", ok(input=[]), {}, 422, "must not be an empty list"),
    ("empty-string", "POST", "/v1/embeddings", ok(input=""), {}, 422, "`input` is empty"),
    ("whitespace-item", "POST", "/v1/embeddings", ok(input=["a", "  \n"]), {}, 422, "`input[1]` is empty"),
    ("number-item", "POST", "/v1/embeddings", ok(input=["a", 3.5]), {}, 422, "`input[1]` must be a string, got number"),
    ("null-item", "POST", "/v1/embeddings", ok(input=[None]), {}, 422, "got null"),
    ("bool-item", "POST", "/v1/embeddings", ok(input=[True]), {}, 422, "got boolean"),
    ("object-item", "POST", "/v1/embeddings", ok(input=[{"text": "a"}]), {}, 422, "got object"),
    ("nested-texts", "POST", "/v1/embeddings", ok(input=[["a", "b"]]), {}, 422, "`input[0][0]` must be a token id"),
    ("mixed-kinds", "POST", "/v1/embeddings", ok(input=["a", [101]]), {}, 422, "mixes texts and token-id lists"),
    ("negative-id", "POST", "/v1/embeddings", ok(input=[101, -3]), {}, 422, "`input[1]` is -3: token ids are not"),
    ("no-ids", "POST", "/v1/embeddings", ok(input=[[101], []]), {}, 422, "`input[1]` is an empty list of token ids"),
    ("unknown-id", "POST", "/v1/embeddings", ok(input=[101, 10**9]), {}, 422, "holds token id 1000000000"),
    ("too-many-ids", "POST", "/v1/embeddings", ok(input=[[101] * 65]), {}, 413, "65 token ids, the limit is 64"),
    ("input-object", "POST", "/v1/embeddings", ok(input={"a": 1}), {}, 422, "list of strings or token ids, got object"),
    ("input-null", "POST", "/v1/embeddings", ok(input=None), {}, 422, "got null"),
    ("input-missing", "POST", "/v1/embeddings", {"model": MODEL}, {}, 422, "`input` is required"),
    ("huge-string", "POST", "/v1/embeddings", ok(input="x" * 3000), {}, 413, "3000 characters, the limit is 2000"),
    (
        "too-many-tokens",
        "POST",
        "/v1/embeddings",
        ok(input=["ok", "word " * 80]),
        {},
        413,
        "`input[1]` has 82 tokens, the limit is 64",
    ),
    ("too-many-items", "POST", "/v1/embeddings", ok(input=["a"] * 33), {}, 413, "33 items, the limit is 32"),
    ("unknown-model", "POST", "/v1/embeddings", ok(model="gpt-4"), {}, 404, "model 'gpt-4' not found"),
    ("model-missing", "POST", "/v1/embeddings", {"input": "a"}, {}, 422, "`model` is required"),
    ("model-not-string", "POST", "/v1/embeddings", ok(model=7), {}, 422, "`model` must be a string, got integer"),
    ("invalid-json", "POST", "/v1/embeddings", b'{"model": "minilm-test", input: 1}', {}, 400, "not valid JSON"),
    ("truncated-json", "POST", "/v1/embeddings", b'{"model": "minilm-test"', {}, 400, "not valid JSON"),
    ("empty-body", "POST", "/v1/embeddings", b"", {}, 400, "not valid JSON"),
    ("json-array-body", "POST", "/v1/embeddings", ["a"], {}, 422, "must be a JSON object, got array"),
    (
        "invalid-utf8",
        "POST",
        "/v1/embeddings",
        b'{"model": "minilm-test", "input": "\xff\xfe"}',
        {},
        400,
        "not valid UTF-8",
    ),
    (
        "lone-surrogate",
        "POST",
        "/v1/embeddings",
        b'{"model": "minilm-test", "input": "a\\ud800b"}',
        {},
        422,
        "unpaired surrogate",
    ),
    ("deep-nesting", "POST", "/v1/embeddings", b"[" * 20_000 + b"]" * 20_000, {}, 400, "nested too deeply"),
    (
        "huge-integer",
        "POST",
        "/v1/embeddings",
        b'{"model": "minilm-test", "input": "a", "dimensions": ' + b"9" * 5000 + b"}",
        {},
        400,
        "body is not readable",
    ),
    (
        "nan-dimensions",
        "POST",
        "/v1/embeddings",
        b'{"model": "minilm-test", "input": "a", "dimensions": NaN}',
        {},
        422,
        "must be an integer, got number",
    ),
    (
        "infinite-id",
        "POST",
        "/v1/embeddings",
        b'{"model": "minilm-test", "input": [101, Infinity]}',
        {},
        422,
        "must be a string, got integer",
    ),
    ("huge-id", "POST", "/v1/embeddings", ok(input=[101, 10**300]), {}, 422, "holds token id 1000"),
    ("text-plain", "POST", "/v1/embeddings", ok(), {"Content-Type": "text/plain"}, 415, "application/json"),
    ("no-content-type", "POST", "/v1/embeddings", ok(), {"Content-Type": None}, 415, "got 'none'"),
    (
        "bad-encoding-format",
        "POST",
        "/v1/embeddings",
        ok(encoding_format="int8"),
        {},
        422,
        "`encoding_format` must be 'float' or 'base64'",
    ),
    ("empty-encoding-format", "POST", "/v1/embeddings", ok(encoding_format=""), {}, 422, "got ''"),
    ("negative-dimensions", "POST", "/v1/embeddings", ok(dimensions=-1), {}, 422, "between 1 and 384, got -1"),
    ("zero-dimensions", "POST", "/v1/embeddings", ok(dimensions=0), {}, 422, "between 1 and 384, got 0"),
    ("too-large-dimensions", "POST", "/v1/embeddings", ok(dimensions=385), {}, 422, "between 1 and 384, got 385"),
    ("string-dimensions", "POST", "/v1/embeddings", ok(dimensions="64"), {}, 422, "must be an integer, got string"),
    ("float-dimensions", "POST", "/v1/embeddings", ok(dimensions=1.5), {}, 422, "must be an integer, got number"),
    ("bool-dimensions", "POST", "/v1/embeddings", ok(dimensions=True), {}, 422, "must be an integer, got boolean"),
    ("bad-input-type", "POST", "/v1/embeddings", ok(input_type="passage"), {}, 422, "'query' or 'document'"),
    ("empty-instruction", "POST", "/v1/embeddings", ok(instruction=" "), {}, 422, "`instruction` must be a non-empty"),
    ("unknown-field", "POST", "/v1/embeddings", ok(temperature=0.2), {}, 422, "unknown field 'temperature'"),
    ("user-not-string", "POST", "/v1/embeddings", ok(user=5), {}, 422, "`user` must be a string"),
    ("body-too-large", "POST", "/v1/embeddings", ok(input=["y" * 1900] * 40), {}, 413, "the limit is 65536"),
    ("missing-key", "POST", "/v1/embeddings", ok(), {"Authorization": None}, 401, "missing API key"),
    ("wrong-key", "POST", "/v1/embeddings", ok(), {"Authorization": f"Bearer {WRONG_KEY}"}, 401, "invalid API key"),
    ("basic-auth", "POST", "/v1/embeddings", ok(), {"Authorization": "Basic dXNlcjpwdw=="}, 401, "malformed"),
    ("models-without-key", "GET", "/v1/models", b"", {"Authorization": None}, 401, "missing API key"),
    ("get-embeddings", "GET", "/v1/embeddings", b"", {}, 405, "method GET not allowed"),
    ("unknown-route", "POST", "/v1/chat/completions", ok(), {}, 404, "no route /v1/chat/completions"),
]


def send(served, method, path, body, headers) -> httpx.Response:
    sent = {"Authorization": f"Bearer {served.key}", "Content-Type": "application/json"}
    for name, value in headers.items():
        if value is None:
            sent.pop(name, None)
        else:
            sent[name] = value
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.request(method, served.url + path, content=content, headers=sent, timeout=30)


def test_table_is_large_enough():
    assert len(CASES) >= 30
    assert len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("method", "path", "body", "headers", "status", "needle"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_request(served, method, path, body, headers, status, needle):
    resp = send(served, method, path, body, headers)
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert needle in error["message"], error
    assert error["type"]
    assert "Traceback" not in resp.text and served.key not in resp.text and WRONG_KEY not in resp.text


def test_keys_never_reach_the_logs(served, ray_cluster):
    for key in (served.key, WRONG_KEY):
        send(served, "POST", "/v1/embeddings", ok(), {"Authorization": f"Bearer {key}"})
    session = ray_cluster._private.worker._global_node.get_session_dir_path()
    logs = glob.glob(f"{session}/logs/**/*", recursive=True)
    assert any("serve" in path for path in logs)
    for path in logs:
        try:
            text = Path(path).read_text(errors="ignore")
        except OSError:
            continue
        assert served.key not in text and WRONG_KEY not in text, path


def test_keys_rotate_without_a_restart(key_file_served):
    import time

    served, keys = key_file_served
    new_key = "ef-rotated-key-9Kp4"

    def status(key: str) -> int:
        return send(served, "POST", "/v1/embeddings", ok(), {"Authorization": f"Bearer {key}"}).status_code

    assert (status(served.key), status(new_key)) == (200, 401)
    keys.write_text(f"{new_key}\n")
    rotated = time.monotonic()
    while status(served.key) != 401 and time.monotonic() - rotated < 30:
        time.sleep(0.25)
    # the old key stops within the reload interval (1 s here) plus a request's time on this loaded machine
    assert time.monotonic() - rotated < 10
    assert (status(served.key), status(new_key)) == (401, 200)
