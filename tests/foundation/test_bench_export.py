"""benchmarks/export.py on the tiny decoder shape: both ways of writing training's exports run in their own
processes, and writing every format from one merge takes half the disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from embedforge.paths import REPO_ROOT

pytestmark = pytest.mark.slow


def test_one_merge_halves_the_exports_on_disk(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "platform")}
    cmd = [sys.executable, str(REPO_ROOT / "benchmarks" / "export.py"), "--shape", "tiny-decoder"]
    done = subprocess.run(
        [*cmd, "--work", str(tmp_path / "work"), "--results", str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads((tmp_path / "export.json").read_text())
    runs = doc["runs"]
    assert set(runs) == {"each_format", "one_merge"}
    assert runs["each_format"]["disk_gb"] > 0
    assert 0.45 <= doc["ratios"]["disk_one_merge_vs_each_format"] <= 0.55
    assert "Traceback" not in done.stderr
