"""Token limits with the real MiniLM tokenizer, and API-key checking."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from embedforge.serve.auth import KeyChecker, _digest, digests_from_env, digests_from_file
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


def test_keys_in_a_file_rotate_within_the_reload_interval(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("old-key\n")
    now = [0.0]
    checker = KeyChecker([], lambda: digests_from_file(keys), reload_s=10.0, clock=lambda: now[0])
    checker.check("Bearer old-key")
    keys.write_text("new-key, other-key\n")
    now[0] = 9.0
    checker.check("Bearer old-key")  # within the interval the keys read last still hold
    now[0] = 10.0
    checker.check("Bearer new-key")
    checker.check("Bearer other-key")
    with pytest.raises(APIError, match="invalid API key"):
        checker.check("Bearer old-key")
    keys.write_text("")  # a half-written rotation keeps the last keys rather than opening or locking out
    now[0] = 20.0
    checker.check("Bearer new-key")
    keys.unlink()
    now[0] = 30.0
    checker.check("Bearer new-key")


def test_an_unreadable_key_file_fails_before_deployment(tmp_path):
    from embedforge.config.serve import ServeConfig
    from embedforge.serve.deploy import build_app

    with pytest.raises(ValueError, match=r"api_keys_file .* cannot be read"):
        build_app(ServeConfig(api_keys_file=str(tmp_path / "missing")), "bundled:all-minilm-l6-v2")
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="holds no API keys"):
        build_app(ServeConfig(api_keys_file=str(tmp_path / "empty")), "bundled:all-minilm-l6-v2")
