"""A local Ray head for development, sized for the machine, with the dashboard on 127.0.0.1:8265.

Stages call `connect()`: inside `ray job submit` (RAY_ADDRESS set) or next to a running head they join it;
otherwise they start a private in-process cluster, so the same code runs in tests, scripts and jobs.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

log = logging.getLogger(__name__)
DASHBOARD_HOST = "127.0.0.1"
DASHBOARD_PORT = 8265
DASHBOARD_URL = f"http://{DASHBOARD_HOST}:{DASHBOARD_PORT}"


def _ray_bin() -> str:
    candidate = Path(sys.executable).with_name("ray")
    return str(candidate) if candidate.exists() else (shutil.which("ray") or "ray")


def default_object_store_bytes() -> int:
    """A quarter of RAM, at most 8 GiB: leaves room for model-holding actors on a 24 GiB machine."""
    return int(min(psutil.virtual_memory().total * 0.25, 8 * 1024**3))


def dashboard_alive(timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{DASHBOARD_URL}/api/version", timeout=timeout) as resp:
            return resp.status == 200
    except OSError:
        return False


def up(num_cpus: int | None = None, wait_s: float = 90.0) -> str:
    """Start the local head (idempotent) and wait until the dashboard answers; returns the dashboard URL."""
    if dashboard_alive():
        log.info("Ray head already running, dashboard at %s", DASHBOARD_URL)
        return DASHBOARD_URL
    cmd = [
        _ray_bin(), "start", "--head",
        f"--num-cpus={num_cpus or os.cpu_count() or 1}",
        f"--object-store-memory={default_object_store_bytes()}",
        "--include-dashboard=true",
        f"--dashboard-host={DASHBOARD_HOST}",
        f"--dashboard-port={DASHBOARD_PORT}",
        "--disable-usage-stats",
    ]
    log.info("starting Ray head: %s", " ".join(cmd))
    subprocess.run(cmd, check=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if dashboard_alive():
            log.info("Ray head up, dashboard at %s", DASHBOARD_URL)
            return DASHBOARD_URL
        time.sleep(1.0)
    raise TimeoutError(f"Ray dashboard did not answer at {DASHBOARD_URL} within {wait_s:.0f}s")


def down() -> None:
    subprocess.run([_ray_bin(), "stop", "--force"], check=False)


def status() -> int:
    return subprocess.run([_ray_bin(), "status"], check=False).returncode


def connect(num_cpus: int | None = None) -> None:
    """Join the job's or the local head's cluster when there is one, else start a private local one."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS") or dashboard_alive(timeout=0.5):
        ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=True)
    else:
        ray.init(
            address="local",
            num_cpus=num_cpus or os.cpu_count(),
            object_store_memory=default_object_store_bytes(),
            include_dashboard=False,
        )
