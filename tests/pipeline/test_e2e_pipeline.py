"""End to end: the pipeline with configs/tiny.yaml submitted with `ray job submit` to a local Ray head, its run dir
in object storage (a local S3 server, moto), then every stage's manifest, the exports and one served embedding
checked; a second submission, with the job's scratch space wiped, resumes from the store alone (skips everything).

The head here is this test's own (`ray start --head --block` on free ports, never the dev head on :8265), so it
can run beside the foundation's cluster test and other engineers' clusters; SIGTERM to it stops exactly it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from embedforge.config import load_config
from embedforge.models.bundled import prepare
from embedforge.pipeline.demo import bundled_models, print_examples
from embedforge.pipeline.probe import base_url, embed
from embedforge.pipeline.runner import read_pipeline
from embedforge.pipeline.submit import submit_pipeline
from embedforge.runs.stage import read_manifest
from embedforge.runs.store import RunStore, staged

REPO = Path(__file__).resolve().parents[2]
TINY = "configs/tiny.yaml"
STAGES = ("synth", "mine", "train", "evaluate")
CPU_RUN = {"device": "cpu", "device_count": 0, "dtype": "float32", "peak_accelerator_memory_mb": 0.0}

pytestmark = pytest.mark.slow


@dataclass
class Head:
    dashboard: str
    env: dict[str, str]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:
        return True  # 401 without a token: the dashboard is up
    except OSError:
        return False
    return True


def _start_head(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen, str] | None:
    """`ray start --head --block` on free ports; the head once its dashboard and job agent answer, else None."""
    port, dash, client, agent, agent_grpc, metrics = (_free_port() for _ in range(6))
    cmd = [
        str(Path(sys.executable).with_name("ray")), "start", "--head", "--block", "--disable-usage-stats",
        f"--port={port}", f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1", "--include-dashboard=true",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
        "--num-cpus=2", f"--object-store-memory={1024**3}",
    ]  # fmt: skip
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 240
    while not (_answers(f"http://127.0.0.1:{dash}/api/version") and _answers(f"http://127.0.0.1:{agent}/")):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            return None
        time.sleep(1)
    time.sleep(5)  # a raylet that cannot find its agents gives up a few seconds later: make sure it did not
    return (proc, f"http://127.0.0.1:{dash}") if proc.poll() is None else None


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM: `ray start --block` drains and stops the processes it started, and only those."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def head(tmp_path_factory, s3_server):
    """A private Ray head with its dashboard on free ports; this venv first on PATH so jobs use its python; its
    processes reach the test S3 server and keep their mirrors in a scratch folder of their own."""
    prepare(bundled_models(load_config(REPO / TINY)))
    logs = tmp_path_factory.mktemp("head")
    env = {
        **os.environ,
        **s3_server,
        "EMBEDFORGE_SCRATCH": str(logs / "scratch"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",  # the CLI must send the token the head (token in ~/.ray) requires
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        # on a loaded machine the raylet may wait longer than its default for the dashboard agent to start
        "RAY_agent_register_timeout_ms": "120000",
        "RAY_raylet_start_wait_time_s": "120",
    }
    env.pop("RAY_ADDRESS", None)
    for attempt in range(3):
        started = _start_head(env, logs / f"ray-start-{attempt}.log")
        if started:
            break
    else:
        pytest.fail(f"the Ray head did not come up in 3 attempts; see {logs}")
    proc, dashboard = started
    yield Head(dashboard, env)
    _stop(proc)


def test_tiny_pipeline_as_a_ray_job(head, s3_server, make_bucket, tmp_path, monkeypatch, capsys):
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMBEDFORGE_SCRATCH", str(tmp_path / "scratch"))  # not the job's: read what the store has
    run_dir = f"{make_bucket()}/runs/tiny"
    code = submit_pipeline(head.dashboard, TINY, run_dir, ["--set", "serve.port=0"], env=head.env)
    assert code == 0, f"pipeline job failed; record: {read_pipeline(run_dir)}"

    record = read_pipeline(run_dir)
    assert record["status"] == "complete" and record["run_dir"] == run_dir
    stored = RunStore(run_dir).files()
    assert any(name.startswith("train/ray/") and name.endswith("state.json") for name in stored)  # Ray Train's
    assert record["steps"]["deploy"]["model"] == f"{run_dir}/train/export/merged"  # replicas copy it from there
    with staged(run_dir) as local:
        _check_run(local, record, capsys)

    # submitted again with the job's scratch space gone: every stage finds its manifest complete in the store
    shutil.rmtree(head.env["EMBEDFORGE_SCRATCH"])
    code = submit_pipeline(head.dashboard, TINY, run_dir, ["--set", "serve.port=0", "--skip", "deploy"], env=head.env)
    assert code == 0
    again = read_pipeline(run_dir)
    for stage in STAGES:
        assert again["steps"][stage]["status"] == "skipped (already complete)", stage


def _check_run(run_dir: Path, record: dict, capsys) -> None:
    """Every stage's manifest, the evaluation report, the exports and the served embedding of a finished run."""
    for stage in STAGES:
        manifest = read_manifest(run_dir / stage)
        assert manifest is not None and manifest["status"] == "complete", stage
        assert record["steps"][stage]["status"] == "complete", stage
        # where the stage ran: every worker on the CPU here, with no accelerator memory, in float32 (vLLM's CPU
        # engine runs bf16 where the processor has native bf16)
        usage = manifest["usage"]
        if stage == "mine" and usage["workers"] == 0:  # every teacher vector was in the embedding cache already
            assert usage["device"] == "none"
            continue
        assert usage["workers"] >= 1, stage
        expected = {**CPU_RUN, "dtype": usage["dtype"] if stage == "synth" else "float32"}
        assert {k: usage[k] for k in CPU_RUN} == expected, stage
        assert usage["dtype"] in ("float32", "bfloat16"), stage
    assert read_manifest(run_dir / "train")["counts"], "training counted nothing"
    assert (run_dir / "evaluate" / "report.md").is_file() and (run_dir / "evaluate" / "report.png").is_file()
    assert "| trained | cpu | 0 | float32 | 0 |" in (run_dir / "evaluate" / "report.md").read_text()
    exports = record["steps"]["export"]["exports"]
    assert set(exports) == {"merged", "sentence_transformers"}

    # one served embedding equals the exported model's own document embedding
    config = load_config(REPO / TINY)
    endpoint = record["steps"]["deploy"]["endpoint"]
    served = np.asarray(embed(endpoint, config, ["Ray runs the whole pipeline as one job."])[0], dtype=np.float32)
    from embedforge.model import load_encoder

    local = load_encoder(run_dir / "train" / "export" / "merged").encode_documents(
        ["Ray runs the whole pipeline as one job."]
    )[0]
    assert served.shape == local.shape
    assert float(served @ local) >= 0.999
    with urllib.request.urlopen(f"{base_url(endpoint)}/ready", timeout=60) as resp:
        ready = json.loads(resp.read())
    assert {k: ready["usage"][k] for k in CPU_RUN} == CPU_RUN

    # the demo's curl and openai-client examples work against the deployment
    print_examples(endpoint, config)
    shown = capsys.readouterr().out
    assert f"curl answered with a {served.shape[0]}-d embedding" in shown
    assert f"the openai client answered with a {served.shape[0]}-d embedding" in shown
