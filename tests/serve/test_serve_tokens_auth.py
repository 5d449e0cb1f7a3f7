"""Token limits with the real MiniLM tokenizer, and API-key checking."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from embedforge.serve.auth import KeyChecker, _digest, digests_from_env
from embedforge.serve.errors import APIError
from embedforge.serve.tokens import TokenLimiter


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
    return AutoTokenizer.from_pretrained(minilm_dir)


def test_counts_include_special_tokens(tokenizer):
    limiter = TokenLimiter(tokenizer, 16)
    texts, counts = limiter.apply(["hello world", "a"], truncate=False)
    assert texts == ["hello world", "a"]
    assert counts == [len(tokenizer("hello world")["input_ids"]), 3]


def test_truncate_cuts_at_a_token_boundary(tokenizer):
    limiter = TokenLimiter(tokenizer, 6)
    (text,), (count,) = limiter.apply(["one two three four five six seven"], truncate=True)
    assert count == 6
    assert text == "one two three four"
    assert len(tokenizer(text)["input_ids"]) == 6


def test_reject_names_the_input_and_limit(tokenizer):
    limiter = TokenLimiter(tokenizer, 6)
    with pytest.raises(APIError) as err:
        limiter.apply(["ok", "one two three four five six seven"], truncate=False)
    assert err.value.status == 413
    assert (
        "input[1]" in err.value.message
        and "limit is 6" in err.value.message
        and '"truncate": true' in err.value.message
    )


def test_keys_from_env(monkeypatch):
    monkeypatch.setenv("EF_TEST_KEYS", " k1 , k2 ")
    assert digests_from_env("EF_TEST_KEYS") == [_digest("k1"), _digest("k2")]
    monkeypatch.delenv("EF_TEST_KEYS")
    with pytest.raises(ValueError, match="EF_TEST_KEYS"):
        digests_from_env("EF_TEST_KEYS")
    assert digests_from_env(None) == []


def test_key_checker():
    checker = KeyChecker([_digest("secret-1"), _digest("secret-2")])
    checker.check("Bearer secret-2")
    for header, needle in [(None, "missing"), ("Basic abc", "malformed"), ("Bearer nope", "invalid API key")]:
        with pytest.raises(APIError) as err:
            checker.check(header)
        assert err.value.status == 401 and needle in err.value.message
        assert "secret" not in err.value.message
    KeyChecker([]).check(None)  # no keys configured: open
