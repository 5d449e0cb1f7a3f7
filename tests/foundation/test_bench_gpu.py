"""benchmarks/gpu.py's tiny mode: every phase of the GPU benchmark (the production profile's training step against
sentence-transformers, encoding, a Ray Serve replica under load, one step of the production batch, the profile's
own Ray Train stage) runs on tiny shapes on the CPU, so the code the GPU run depends on cannot rot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from embedforge.paths import REPO_ROOT

pytestmark = pytest.mark.slow
SCRIPT = REPO_ROOT / "benchmarks" / "gpu.py"


def run(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "platform"), "OUT": kw.pop("out", "")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, **kw)


def test_tiny_mode_runs_every_phase_and_reports_the_ratios(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    done = run("--tiny", "--results", str(tmp_path), "--models-dir", str(tmp_path / "models"), out=str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads((tmp_path / "gpu.json").read_text())
    failed = {name: p["status"] for name, p in doc["phases"].items() if p["status"] != "ok"}
    assert not failed, failed
    ratios = doc["ratios"]
    for key in (
        "train_mfu",
        "train_tokens_per_s_vs_sentence_transformers",
        "train_tokens_per_s_vs_sentence_transformers_mixed",
        "encode_mfu_tiny_decoder",
        "encode_tokens_per_s_vs_st_default_tiny_decoder_mixed",
        "encode_mfu_tiny_bert",
        "serve_vs_offline",
        "production_batch_fits",
        "train_ray_completed",
    ):
        assert ratios[key] > 0, key
    assert ratios["serve_errors"] == 0 and ratios["fast_path_min_cosine_vs_padded"] > 0.999
    train = doc["phases"]["train"]["result"]["uniform"]
    assert train["tokens_per_step"] == 2 * 9 * 48  # 2 queries + 16 documents, each cut to the 48-token maximum
    ray_train = doc["phases"]["train_ray"]["result"]
    assert ray_train["usage"]["device"] == "cpu" and ray_train["throughput"]["tokens_per_s_median"] > 0
    assert (tmp_path / "gpu.png").stat().st_size > 10_000
    assert sorted(p.name for p in out.iterdir()) == ["gpu.json", "gpu.png"]  # copied for the GPU bundle's $OUT

    merged = tmp_path / "merged"
    done = run("--merge", str(tmp_path / "gpu.json"), str(tmp_path / "gpu.json"), "--results", str(merged))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((merged / "gpu.json").read_text())["ratios"] == ratios


def test_without_a_gpu_the_full_run_says_so_in_one_line(tmp_path):
    done = run("--results", str(tmp_path))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: no CUDA GPU here; `--tiny` runs the same code on tiny shapes on the CPU"
    ]


def test_a_failed_phase_keeps_the_last_lines_it_printed(tmp_path, load_benchmark, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    gpu = load_benchmark("gpu")
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"device": "cpu", "models_dir": str(tmp_path), "decoder": "tiny", "train": {}}))
    status, result, seconds, tail = gpu.run_subprocess("no_such_phase", settings, tmp_path, 120)
    assert status == "failed (exit 1)" and result is None and seconds > 0
    assert 0 < len(tail) <= gpu.LOG_TAIL
    assert tail[-1] == "ValueError: unknown phase 'no_such_phase'"
    assert "unknown phase 'no_such_phase'" in capsys.readouterr().out  # passed through as it came
