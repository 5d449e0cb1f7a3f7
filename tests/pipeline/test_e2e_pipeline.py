"""End to end: the pipeline with configs/tiny.yaml submitted with `ray job submit` to a local Ray head, its run dir
in object storage (a local S3 server, moto), then every stage's manifest, the exports and one served embedding
checked. Then a second node joins that head, making a cluster of two, with each stage pinned to a node by custom
resources and each node with its own scratch and cache folders: the pinned run's outputs equal the single-node
run's, and the single-node run, submitted again once every node's scratch and cache are emptied, resumes from the
store alone (every stage skips).

The head is this test's own (`ray start --head --block` on free ports, never the dev head on :8265), so it can run
beside the foundation's cluster test and other engineers' clusters; SIGTERM to a node stops exactly it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from embedforge.cluster.device import read_usage
from embedforge.cluster.local import ensure_auth_token
from embedforge.config import load_config
from embedforge.models.bundled import prepare
from embedforge.paths import models_dir
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
    gcs: str
    env: dict[str, str]
    folder: Path
    proc: subprocess.Popen


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


def _start_node(
    env: dict[str, str], log_path: Path, *, head: str | None = None, resources: dict[str, float] | None = None
) -> tuple[subprocess.Popen, str, str] | None:
    """`ray start --block` on free ports: a head (with its dashboard) when `head` is None, else a node joining the
    head at that GCS address. Returns (process, dashboard URL, GCS address) once its agents answer, else None.

    Each node keeps its sessions in a temp dir of its own (`RAY_NODE_TMP` in `env`), as on separate machines: nodes
    sharing one would share one unpacked copy of a job's working dir, which each node's agent replaces under the
    driver running in it."""
    port, dash, client, agent, agent_grpc, metrics = (_free_port() for _ in range(6))
    cmd = [
        str(Path(sys.executable).with_name("ray")), "start", "--block", "--disable-usage-stats",
        f"--temp-dir={env['RAY_NODE_TMP']}",
        f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
        f"--metrics-export-port={metrics}", "--num-cpus=2", f"--object-store-memory={512 * 1024**2}",
    ]  # fmt: skip
    if head is None:
        cmd += [
            "--head", f"--port={port}", f"--dashboard-port={dash}", "--dashboard-host=127.0.0.1",
            "--include-dashboard=true", f"--ray-client-server-port={client}",
        ]  # fmt: skip
    else:
        cmd.append(f"--address={head}")
    if resources:
        cmd.append(f"--resources={json.dumps(resources)}")
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 240
    up = [f"http://127.0.0.1:{agent}/"] + ([f"http://127.0.0.1:{dash}/api/version"] if head is None else [])
    while not all(_answers(url) for url in up):
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc)
            return None
        time.sleep(1)
    time.sleep(5)  # a raylet that cannot find its agents gives up a few seconds later: make sure it did not
    return (proc, f"http://127.0.0.1:{dash}", f"127.0.0.1:{port}") if proc.poll() is None else None


def _node_with_retries(env: dict[str, str], logs: Path, name: str, **kwargs) -> tuple[subprocess.Popen, str, str]:
    for attempt in range(3):
        started = _start_node(env, logs / f"{name}-{attempt}.log", **kwargs)
        if started:
            return started
    pytest.fail(f"Ray node {name} did not come up in 3 attempts; see {logs}")


def _stop(*procs: subprocess.Popen) -> None:
    """SIGTERM to every node at once: `ray start --block` drains and stops the processes it started, and only
    those; a node still up after 90 s is killed."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 90
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def _node_env(s3_server: dict[str, str], folder: Path) -> dict[str, str]:
    """A node's environment: this venv first on PATH so jobs use its python, the test S3 server, and scratch and
    cache folders of its own (the prepared models linked in, as a node image would hold them)."""
    cache = folder / "cache"
    cache.mkdir(parents=True)
    # short: Ray's socket paths under it must stay within the 107 bytes a Unix socket path may have
    ray_tmp = tempfile.mkdtemp(prefix="ef-ray-")
    (cache / "models").symlink_to(models_dir(), target_is_directory=True)
    env = {
        **os.environ,
        **s3_server,
        "EMBEDFORGE_SCRATCH": str(folder / "scratch"),
        "EMBEDFORGE_CACHE": str(cache),
        "RAY_NODE_TMP": ray_tmp,
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
    return env


# where each stage runs on the two-node cluster: the driver and generation on the head, learning on the other node
GENERATE, LEARN = {"generate_node": 1.0}, {"learn_node": 1.0}


@pytest.fixture(scope="module")
def head(tmp_path_factory, s3_server):
    """A private Ray head with its dashboard on free ports; it holds the generation resource, which the single-node
    run does not ask for, and the learning node joins it later (`two_nodes`)."""
    prepare(bundled_models(load_config(REPO / TINY)))
    ensure_auth_token()  # every head here runs with token auth: a fresh machine has no ~/.ray/auth_token yet
    folder = tmp_path_factory.mktemp("head")
    env = _node_env(s3_server, folder)
    proc, dashboard, gcs = _node_with_retries(env, folder, "ray-start", resources=GENERATE)
    yield Head(dashboard, gcs, env, folder, proc)
    _stop(proc)
    shutil.rmtree(env["RAY_NODE_TMP"], ignore_errors=True)


@pytest.fixture(scope="module")
def single_node_run(head, make_bucket) -> str:
    """configs/tiny.yaml submitted to the one-node cluster, its run dir on the S3 server; returns the run dir."""
    run_dir = f"{make_bucket()}/runs/tiny"
    code = submit_pipeline(head.dashboard, TINY, run_dir, ["--set", "serve.port=0"], env=head.env)
    assert code == 0, f"pipeline job failed; record: {read_pipeline(run_dir)}"
    return run_dir


def test_tiny_pipeline_as_a_ray_job(head, single_node_run, s3_server, tmp_path, monkeypatch, capsys):
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMBEDFORGE_SCRATCH", str(tmp_path / "scratch"))  # not the job's: read what the store has
    run_dir = single_node_run
    record = read_pipeline(run_dir)
    assert record["status"] == "complete" and record["run_dir"] == run_dir
    stored = RunStore(run_dir).files()
    assert any(name.startswith("train/ray/") and name.endswith("state.json") for name in stored)  # Ray Train's
    assert any(name.startswith("embeddings/") and name.endswith(".keys.npy") for name in stored)  # the teacher's
    assert record["steps"]["deploy"]["model"] == f"{run_dir}/train/export/merged"  # replicas copy it from there
    with staged(run_dir) as local:
        _check_run(local, record, capsys)


PINNED = [
    "--set", "synth.generator.resources={generate_node: 0.1}",
    "--set", "mine.teachers.0.resources={generate_node: 0.1}",
    "--set", "evaluate.resources={generate_node: 0.1}",
    "--set", "train.resources={learn_node: 0.1}",
    "--set", "serve.resources={learn_node: 0.1}",
]  # fmt: skip


def _empty(folder: Path) -> None:
    """Removes what a node kept (run mirrors, copied inputs, cached embeddings) but the prepared models' link."""
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name == "models":
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


@dataclass
class Cluster:
    dashboard: str
    env: dict[str, str]
    node_folders: dict[str, Path]

    def forget_runs(self) -> None:
        """Empties every node's scratch and cache, as if the run had never been on any of them."""
        for folder in self.node_folders.values():
            _empty(folder / "scratch")
            _empty(folder / "cache")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory, s3_server, single_node_run, head):
    """The head after the single-node run, with Serve shut down and a second node joined (`ray start --address`)
    with its own environment: scratch, cache, and the custom resource that learning is pinned to. Every node starts
    the pinned run with empty scratch and cache folders."""
    serve = [str(Path(sys.executable).with_name("serve")), "shutdown", "--yes", "--address", head.dashboard]
    subprocess.run(serve, env=head.env, check=True, capture_output=True, timeout=120)
    folders = {"generate": head.folder, "learn": tmp_path_factory.mktemp("learn")}
    env = _node_env(s3_server, folders["learn"])
    proc, _, _ = _node_with_retries(env, folders["learn"], "learn", head=head.gcs, resources=LEARN)
    cluster = Cluster(head.dashboard, head.env, folders)
    cluster.forget_runs()
    yield cluster
    _stop(proc, head.proc)  # both nodes drain at once
    shutil.rmtree(env["RAY_NODE_TMP"], ignore_errors=True)


def test_pinned_stages_on_two_nodes_equal_one_node_and_resume_from_the_store(
    two_nodes, single_node_run, make_bucket, s3_server, tmp_path, monkeypatch
):
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMBEDFORGE_SCRATCH", str(tmp_path / "scratch"))
    run_dir = f"{make_bucket()}/runs/tiny-two-nodes"
    args = ["--set", "serve.port=0", *PINNED]
    code = submit_pipeline(two_nodes.dashboard, TINY, run_dir, args, env=two_nodes.env)
    assert code == 0, f"pipeline job failed; record: {read_pipeline(run_dir)}"
    assert read_pipeline(run_dir)["status"] == "complete"

    with staged(run_dir) as local:
        nodes = {stage: {r["node"] for r in read_usage(local / stage / "usage")} for stage in STAGES}
        two = _outputs(local)
    with staged(single_node_run) as local:
        one = _outputs(local)
    # each stage on its node: generation and evaluation together, training on another node
    assert all(len(ids) == 1 for ids in nodes.values()), nodes
    assert nodes["synth"] == nodes["mine"] == nodes["evaluate"] != nodes["train"]
    # training's end (export) ran in a task on the training node, in that node's mirror of the run
    assert list((two_nodes.node_folders["learn"] / "scratch" / "runs").glob("*/train/export/merged/embedforge.json"))
    # every node kept its own copies: the trained model reached the evaluating and the serving node via the store
    for name, copy in (("generate", "model"), ("learn", "merged")):
        copies = list((two_nodes.node_folders[name] / "scratch" / "inputs").glob(f"*/{copy}"))
        assert copies, f"no copy of the trained model ({copy}) in node {name}'s scratch"
    # the same examples, negatives, training losses and scores as on one node
    assert two.keys() == one.keys()
    for name in ("synth", "mine"):
        assert two[name] == one[name], name
    np.testing.assert_allclose(two["losses"], one["losses"], rtol=1e-4)
    assert two["scores"].keys() == one["scores"].keys()
    np.testing.assert_allclose(list(two["scores"].values()), list(one["scores"].values()), atol=1e-4)

    # the single-node run, submitted again once no node keeps anything of it: every stage finds it complete
    two_nodes.forget_runs()
    code = submit_pipeline(two_nodes.dashboard, TINY, single_node_run, ["--skip", "deploy", *PINNED], env=two_nodes.env)
    assert code == 0
    again = read_pipeline(single_node_run)
    for stage in STAGES:
        assert again["steps"][stage]["status"] == "skipped (already complete)", stage


def _outputs(run_dir: Path) -> dict:
    """What a run produced, comparable across runs: synthetic and mined examples, training losses, scores."""

    def rows(folder: Path) -> list[str]:
        return sorted(json.dumps(row, sort_keys=True, default=str) for row in pq.read_table(folder).to_pylist())

    with (run_dir / "train" / "metrics.csv").open() as fh:
        losses = [float(row["loss"]) for row in csv.DictReader(fh)]
    tasks = json.loads((run_dir / "evaluate" / "report.json").read_text())["tasks"]
    return {
        "synth": rows(run_dir / "synth" / "data"),
        "mine": rows(run_dir / "mine" / "data"),
        "losses": losses,
        "scores": {f"{task}/{model}": score for task, t in tasks.items() for model, score in t["scores"].items()},
    }


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
    # each export's model card names the run, its data with counts, and the run's evaluation of the model
    train = read_manifest(run_dir / "train")
    report = json.loads((run_dir / "evaluate" / "report.json").read_text())
    for fmt in exports:
        card = (run_dir / "train" / "export" / fmt / "README.md").read_text()
        assert f"- run: {record['run_dir']}\n" in card and f"- settings hash: {train['config_hash']}" in card
        for name, count in train["counts"].items():
            if name.startswith("examples."):
                assert f"- {name.removeprefix('examples.')}: {count} examples" in card
        for task, info in report["tasks"].items():
            if "trained" in info["scores"]:
                assert f"| {task} | {info['main_metric']} | {info['scores']['trained']:.4f} |" in card

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
