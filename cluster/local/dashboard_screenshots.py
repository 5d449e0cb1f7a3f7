"""Screenshots of the Ray dashboard during a real demo run, for docs/guide.md (docs/images/dashboard-*.png).

Runs the demo (`python -m embedforge.pipeline.demo CONFIG`: the local head, the pipeline as a Ray job, the Serve
deployment), follows the run's pipeline.json, and takes each screenshot with headless Chromium when the run gets
there: the job list and the job's page (its log and Ray Data progress) while the pipeline mines, the actors page
(Ray Train's workers) while it trains, the Serve page once it serves. Ray's dashboard asks a browser for the head's
token; a local proxy in this script adds it to every request, as Ray's own CLI does.

    .venv/bin/python cluster/local/dashboard_screenshots.py [--config configs/documents.yaml] [--chromium PATH]

Needs Chromium (Debian: `apt-get install chromium`). Leaves the head and the deployment running, as the demo does.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"
STEPS = ["synth", "mine", "train", "evaluate", "export", "deploy", "done"]


def training(run_dir: Path) -> bool:
    """Ray Train's workers are up: the train step runs and has written its first metrics."""
    return (run_dir / "train" / "metrics.csv").is_file()


# (file, dashboard route, the pipeline step from which it is taken, what else must hold, window height)
SHOTS = [
    ("dashboard-jobs.png", "/#/jobs", "mine", None, 900),
    ("dashboard-job.png", "/#/jobs/{job}", "mine", None, 1500),
    ("dashboard-actors.png", "/#/actors", "train", training, 1100),
    ("dashboard-serve.png", "/#/serve", "done", None, 900),
]


def token() -> str:
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    return os.environ.get("RAY_AUTH_TOKEN") or path.read_text().strip()


def start_proxy(dashboard: str, auth: str) -> str:
    """A local HTTP proxy to the dashboard that adds the token; returns its base URL."""

    class Forward(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
            headers["Authorization"] = f"Bearer {auth}"
            request = urllib.request.Request(dashboard + self.path, body, headers, method=self.command)
            try:
                with urllib.request.urlopen(request, timeout=60) as resp:
                    status, data, kept = resp.status, resp.read(), resp.headers.items()
            except urllib.error.HTTPError as err:
                status, data, kept = err.code, err.read(), err.headers.items()
            self.send_response(status)
            for key, value in kept:
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def screenshot(chromium: str, url: str, out: Path, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
                "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", f"--window-size=1440,{height}", "--virtual-time-budget=15000",
                f"--screenshot={out}", url,
            ],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    print(f"  {out.relative_to(REPO)} <- {url}", flush=True)


def step_running(run_dir: Path) -> str | None:
    """The pipeline step now running ("done" once the pipeline completed), from its pipeline.json: a step's entry
    says pending until it ends."""
    try:
        record = json.loads((run_dir / "pipeline.json").read_text())
    except (OSError, ValueError):
        return None
    if record.get("status") == "complete":
        return "done"
    return next((name for name, step in record.get("steps", {}).items() if step.get("status") == "pending"), None)


def job_id(dashboard: str, auth: str) -> str | None:
    request = urllib.request.Request(f"{dashboard}/api/jobs/", headers={"Authorization": f"Bearer {auth}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        jobs = [j for j in json.loads(resp.read()) if (j.get("submission_id") or "").startswith("embedforge-pipeline")]
    return max(jobs, key=lambda j: j.get("start_time") or 0)["submission_id"] if jobs else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/documents.yaml")
    parser.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    args = parser.parse_args(argv)
    if not args.chromium:
        print("error: Chromium not found (apt-get install chromium, or --chromium PATH)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "platform"))
    from embedforge.cluster.local import DASHBOARD_URL
    from embedforge.config import load_config

    load_config(REPO / args.config)  # a bad config fails here, before the demo starts
    run_dir = REPO / "runs" / "dashboard-screenshots"
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run passes through every step
    IMAGES.mkdir(parents=True, exist_ok=True)
    demo = subprocess.Popen(
        [sys.executable, "-m", "embedforge.pipeline.demo", args.config, "--run-dir", str(run_dir)], cwd=REPO
    )
    pending = list(SHOTS)
    proxy, auth = None, None
    while pending and demo.poll() is None:
        time.sleep(2)
        step = step_running(run_dir)
        if step is None:
            continue
        if proxy is None:
            auth = token()
            proxy = start_proxy(DASHBOARD_URL, auth)
        for shot in list(pending):
            name, route, first, also, height = shot
            if STEPS.index(first) > STEPS.index(step) or (also is not None and not also(run_dir)):
                continue
            job = job_id(DASHBOARD_URL, auth) if "{job}" in route else None
            screenshot(args.chromium, proxy + route.format(job=job), IMAGES / name, height)
            pending.remove(shot)
    code = demo.wait()
    if pending:
        print(f"error: the demo ended (exit {code}) before {[s[0] for s in pending]} could be taken", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
