"""cluster up -> `ray job submit` the smoke job -> SUCCEEDED -> manifest present -> cluster down.

The only test that uses the development head on 127.0.0.1:8265. It starts the head from an environment whose PATH
lacks the venv, to check that the head still runs job drivers with this venv's python.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from embedforge.cluster import local
from embedforge.data.io import read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.runs.stage import read_manifest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _embedforge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "embedforge"), *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.slow
def test_cluster_up_submit_smoke_job_down(tmp_path):
    bare_env = {**os.environ, "PATH": "/usr/bin:/bin", "RAY_USAGE_STATS_ENABLED": "0"}
    bare_env.pop("RAY_ADDRESS", None)
    already_up = local.dashboard_alive()
    try:
        up = _embedforge("cluster", "up", "--num-cpus", "2", env=bare_env)
        assert up.returncode == 0, up.stderr
        assert local.DASHBOARD_URL in up.stdout and local.dashboard_alive()
        run_dir = tmp_path / "run"
        submission = f"embedforge-smoke-test-{os.getpid()}"
        job = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", local.DASHBOARD_URL, "--working-dir", ".",
             "--submission-id", submission, "--", "python", "jobs/smoke.py", "--run-dir", str(run_dir),
             "--dataset", "mrpc", "--split", "test"],
            cwd=REPO, capture_output=True, text=True, timeout=400,
            env={**os.environ, "PATH": f"{BIN}:/usr/bin:/bin", "RAY_AUTH_MODE": local.AUTH_MODE},
        )
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        status = subprocess.run([str(BIN / "ray"), "job", "status", "--address", local.DASHBOARD_URL, submission],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "RAY_AUTH_MODE": local.AUTH_MODE})
        assert f"job '{submission}' succeeded" in (status.stdout + status.stderr).lower()

        manifest = read_manifest(run_dir / "smoke")
        assert manifest is not None and manifest["status"] == "complete"
        assert Path(manifest["python"]).parent == BIN  # the head ran the driver with this venv's python
        assert manifest["counts"]["records"] == 1725  # MANIFEST.md: mrpc test rows
        examples = read_parquet(run_dir / "smoke" / "data", TrainingExample)
        assert len(examples) == manifest["counts"]["examples"] > 0
        assert {e.task_type for e in examples} == {"pair"}
    finally:
        if not already_up:
            down = _embedforge("cluster", "down", env=bare_env)
            assert down.returncode == 0, down.stderr
    if not already_up:
        assert not local.dashboard_alive()
        assert local.head_processes() == []
