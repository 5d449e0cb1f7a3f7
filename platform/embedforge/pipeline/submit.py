"""Submit the pipeline to a Ray cluster with `ray job submit`, streaming the job's log until it ends."""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from embedforge.cluster.local import _ray_bin
from embedforge.paths import REPO_ROOT

log = logging.getLogger(__name__)


def pipeline_command(
    address: str,
    config_path: str,
    run_dir: Path,
    extra_args: Sequence[str] = (),
    submission_id: str | None = None,
) -> list[str]:
    """The `ray job submit` command line: the repository as working dir, this venv's python as the driver."""
    submission_id = submission_id or f"embedforge-pipeline-{int(time.time())}"
    return [
        _ray_bin(), "job", "submit",
        "--address", address,
        "--working-dir", str(REPO_ROOT),
        "--submission-id", submission_id,
        "--",
        sys.executable, "jobs/pipeline.py", config_path, "--run-dir", str(Path(run_dir).resolve()),
        *extra_args,
    ]  # fmt: skip


def submit_pipeline(
    address: str,
    config_path: str,
    run_dir: Path,
    extra_args: Sequence[str] = (),
    submission_id: str | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run `ray job submit` and stream its output here; returns its exit code (0 only if the job SUCCEEDED)."""
    cmd = pipeline_command(address, config_path, run_dir, extra_args, submission_id)
    log.info("$ %s", shlex.join(cmd))
    return subprocess.run(cmd, cwd=REPO_ROOT, env=env, check=False).returncode
