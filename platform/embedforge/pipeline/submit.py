"""Submit the pipeline to a Ray cluster with `ray job submit`, follow the job's log, and report how it ended.

A head that has just started may answer on its dashboard before its job agent is up ("No available agent to
submit job"), and a busy dashboard may drop the working-dir upload; the submission is retried for a while in
those cases only.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from embedforge.cluster.local import _ray_bin, client_env
from embedforge.paths import REPO_ROOT
from embedforge.runs.store import is_remote

log = logging.getLogger(__name__)
TRANSIENT = ("No available agent", "Connection aborted", "RemoteDisconnected")


def pipeline_command(
    address: str, config_path: str, run_dir: str | Path, extra_args: Sequence[str], submission_id: str
) -> list[str]:
    """`ray job submit --no-wait`: the repository as working dir, this venv's python as the job's driver; a local
    run dir is made absolute, a URI (s3://, gs://) is passed as it is."""
    run_dir = str(run_dir) if is_remote(run_dir) else str(Path(run_dir).resolve())
    return [
        _ray_bin(), "job", "submit", "--no-wait",
        "--address", address,
        "--working-dir", str(REPO_ROOT),
        "--submission-id", submission_id,
        "--metadata-json", json.dumps({"embedforge_config": config_path, "run_dir": run_dir}),
        "--",
        sys.executable, "jobs/pipeline.py", config_path, "--run-dir", run_dir,
        *extra_args,
    ]  # fmt: skip


_ENDED = {"succeeded": "SUCCEEDED", "failed": "FAILED", "was stopped": "STOPPED"}


def job_status(address: str, submission_id: str, env: dict[str, str] | None = None) -> str:
    """SUCCEEDED, FAILED, STOPPED (or RUNNING, PENDING), read from what `ray job status` prints."""
    cmd = [_ray_bin(), "job", "status", "--address", address, submission_id]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    text = out.stdout + out.stderr
    ended = re.search(rf"Job '{re.escape(submission_id)}' (succeeded|failed|was stopped)", text)
    if ended:
        return _ENDED[ended.group(1)]
    other = re.search(rf"Status for job '{re.escape(submission_id)}': (?:JobStatus\.)?(\w+)", text)
    if other:
        return other.group(1)
    raise RuntimeError(f"`{shlex.join(cmd)}` gave no status:\n{text}")


def submit_pipeline(
    address: str,
    config_path: str,
    run_dir: str | Path,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    ready_wait_s: float = 180.0,
) -> int:
    """Submit, stream the job's log here until it ends; 0 only if the job SUCCEEDED."""
    env = client_env() if env is None else env
    submission_id = f"embedforge-pipeline-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = pipeline_command(address, config_path, run_dir, extra_args, submission_id)
    log.info("$ %s", shlex.join(cmd))
    deadline = time.monotonic() + ready_wait_s
    while True:
        out = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
        if out.returncode == 0:
            break
        if any(t in out.stdout + out.stderr for t in TRANSIENT) and time.monotonic() < deadline:
            log.info("the head is not ready for jobs yet; submitting again in 5s")
            time.sleep(5)
            continue
        sys.stderr.write(out.stdout + out.stderr)
        return out.returncode
    log.info("job %s submitted; following its log (also in the dashboard's Jobs tab)", submission_id)
    logs = [_ray_bin(), "job", "logs", "--follow", "--address", address, submission_id]
    subprocess.run(logs, env=env, check=False)
    status = job_status(address, submission_id, env)
    log.info("job %s %s", submission_id, status)
    return 0 if status == "SUCCEEDED" else 1
