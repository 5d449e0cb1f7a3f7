"""The README's "Using it" commands and the guide's next steps, run as a user runs them after `make demo`: from a
plain shell (the venv's bin on PATH and nothing the Makefile exports: no RAY_AUTH_MODE, RAY_ADDRESS or offline
switches), against the local head on its port, with configs/tiny.yaml standing in for configs/local.yaml.

config check -> synth -> mine -> train as `ray job submit ... python jobs/train.py` -> eval of the trained model
and a bundled one -> run (resumes: the finished stages skip) -> serve --run-dir --detach -> the guide's curl ->
the README's Python lines -> `tensorboard --logdir RUN/train` serving the training curves -> `serve deploy
configs/serve/local.yaml` answering on port 8000 -> cluster down. tests/foundation/test_doc_commands.py keeps the
list of which test runs each command the docs show.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from embedforge.cluster import local
from embedforge.runs.stage import read_manifest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TINY = "configs/tiny.yaml"
# the evaluation's tasks trimmed to two, so the walk stays a few minutes; every other setting is the profile's
FEW_TASKS = ("--set", "evaluate.tasks=[stsb,wikiqa]")
MAKEFILE_EXPORTS = ("RAY_AUTH_MODE", "RAY_ADDRESS", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")

# the development head (:8265, Serve on :8000) is one per machine: one xdist worker runs every test that uses it
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("dev_head")]


def _plain_shell() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MAKEFILE_EXPORTS}
    return {**env, "PATH": f"{BIN}{os.pathsep}/usr/bin{os.pathsep}/bin"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def test_the_readme_commands_in_a_plain_shell(tmp_path):
    if not local.head_running() and local.port_owner(8265):
        pytest.skip("another user's Ray holds port 8265, which the README's commands name")
    if local.port_owner(8000) and "ray" not in local.port_owner(8000):
        pytest.skip(f"port 8000, where configs/serve/local.yaml serves, is taken ({local.port_owner(8000)})")
    env = _plain_shell()
    run_dir = tmp_path / "runs" / "x"

    def sh(*args: str, extra: dict[str, str] | None = None, timeout: float = 600) -> str:
        done = subprocess.run(
            args, capture_output=True, text=True, env={**env, **(extra or {})}, cwd=REPO, timeout=timeout
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, (
            f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout

    already_up = local.head_running()
    try:
        sh("embedforge", "cluster", "up")
        assert "name: tiny" in sh("embedforge", "config", "check", TINY)
        sh("embedforge", "synth", TINY, "--run-dir", str(run_dir))
        sh("embedforge", "mine", TINY, "--run-dir", str(run_dir))
        # Ray's own CLI sends the head's token only in token mode: the README's line sets it
        sh(
            "ray", "job", "submit", "--address", "http://127.0.0.1:8265", "--working-dir", ".", "--",
            "python", "jobs/train.py", TINY, "--run-dir", str(run_dir), extra={"RAY_AUTH_MODE": "token"},
        )  # fmt: skip
        for stage in ("synth", "mine", "train"):
            assert read_manifest(run_dir / stage)["status"] == "complete", stage
        model = run_dir / "train" / "model"
        evaluated = sh(
            "embedforge", "eval", TINY, "--run-dir", str(run_dir), "--model", str(model),
            "--model", "bundled:all-minilm-l6-v2", *FEW_TASKS,
        )  # fmt: skip
        assert "report at" in evaluated
        ran = sh("embedforge", "run", TINY, "--run-dir", str(run_dir), *FEW_TASKS, "--set", "serve.port=0")
        record = json.loads((run_dir / "pipeline.json").read_text())
        skipped = [record["steps"][s]["status"].startswith("skipped") for s in ("synth", "mine", "train")]
        assert all(skipped), record["steps"]
        assert record["steps"]["deploy"]["status"] == "complete" and "endpoint:" in ran

        # Serve keeps the port its proxy took first (the run's deploy above): the printed URL is where it answers
        url = sh("embedforge", "serve", TINY, "--run-dir", str(run_dir), "--detach").strip().splitlines()[-1]
        assert url.startswith("http://127.0.0.1:"), url
        # the guide's curl, with the key a user exports (this profile sets no keys: any bearer is accepted)
        body = '{"model": "embedforge", "input": ["a question"], "input_type": "query"}'
        answer = sh(
            "curl", "-s", "--fail-with-body", f"{url}/v1/embeddings",
            "-H", "Content-Type: application/json", "-H", "Authorization: Bearer some-key", "-d", body,
        )  # fmt: skip
        served = json.loads(answer)["data"][0]["embedding"]
        # the README's Python lines give the vector the endpoint serves for the same query
        snippet = (
            "import json; from embedforge import load_embedder; "
            f"m = load_embedder({str(model)!r}); "
            "print(json.dumps(m.encode_queries(['a question'], task=None)[0].tolist()))"
        )
        offline = json.loads(sh(sys.executable, "-c", snippet).strip().splitlines()[-1])
        assert len(offline) == len(served)
        assert sum(a * b for a, b in zip(offline, served, strict=True)) > 0.999

        board_port = _free_port()
        board = subprocess.Popen(
            ["tensorboard", "--logdir", str(run_dir / "train"), "--port", str(board_port)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 90
            tags: dict = {}
            while time.monotonic() < deadline and not tags:
                try:
                    tags = json.loads(_get(f"http://127.0.0.1:{board_port}/data/plugin/scalars/tags"))
                except OSError:
                    time.sleep(1)
            scalars = {tag for run in tags.values() for tag in run}
            assert {"train/lr", "train/tokens_per_s"} <= scalars, tags
        finally:
            board.terminate()
            board.wait(timeout=30)

        # the README's Serve config file onto the running head, with Ray's own CLI (token mode, as for ray job)
        token = {"RAY_AUTH_MODE": "token"}
        sh("serve", "shutdown", "-y", "--address", "http://127.0.0.1:8265", extra=token)
        sh("serve", "deploy", "configs/serve/local.yaml", "--address", "http://127.0.0.1:8265", extra=token)
        deadline = time.monotonic() + 180
        models: dict = {}
        while time.monotonic() < deadline and not models:
            try:
                models = json.loads(_get("http://127.0.0.1:8000/v1/models"))
            except OSError:
                time.sleep(1)
        assert [(m["id"], m["dimension"]) for m in models["data"]] == [("all-minilm-l6-v2", 384)], models
        sh("serve", "shutdown", "-y", "--address", "http://127.0.0.1:8265", extra=token)
    finally:
        if not already_up:
            subprocess.run(["embedforge", "cluster", "down"], env=env, cwd=REPO, capture_output=True, timeout=300)
