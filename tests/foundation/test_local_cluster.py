"""cluster up -> `ray job submit` the smoke job -> SUCCEEDED -> manifest present -> cluster down.

With the README walk, one of the two tests that use the development head (dashboard on 127.0.0.1:8265; on a
shared machine where another user's Ray already holds 8265, on a free port through EMBEDFORGE_DASHBOARD_PORT), so
both run in one pytest worker. It starts the head from an environment whose PATH lacks the venv, to check that the
head still runs job drivers with this venv's python.
A private cluster (the `ray_cluster` fixture) runs throughout and must survive `cluster down`.
It runs with an empty HOME, as on a fresh machine: no Ray token yet, so `cluster up` must make one.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embedforge.cluster import local
from embedforge.data.io import read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.runs.stage import read_manifest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


# an actor that asks the cluster's state API for its own state, as Ray Train's placement-group monitor asks for the
# controller's: it must find the API of the cluster it runs in
STATE_PROBE = (
    "probe = ray.remote(num_cpus=0)(type('Probe', (), {'state': lambda self: __import__('ray.util.state')"
    ".util.state.get_actor(ray.get_runtime_context().get_actor_id(), timeout=20).state})).remote(); "
)


def test_a_private_cluster_tells_its_workers_where_its_state_api_is(ray_cluster):
    """Beside this session's cluster (a second Ray cluster on the machine), a command's private cluster still
    answers its workers' state queries: the auto-detected address would be another cluster's."""
    code = (
        "from embedforge.cluster.local import start_private_cluster; import ray; "
        f"start_private_cluster(1, 256 * 1024**2); {STATE_PROBE}print(ray.get(probe.state.remote()))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "ALIVE"
    assert "Timed out while waiting for GCS" not in result.stderr


def test_the_head_tells_its_workers_where_its_state_api_is():
    assert local._head_env()["RAY_API_SERVER_ADDRESS"] == local.DASHBOARD_URL
    assert local._head_env()["RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"] == "0"


@pytest.mark.slow
def test_a_training_run_on_a_private_cluster_logs_no_ray_errors():
    """A Ray Train run on one machine, its worker logging as embedforge's do: no preemption-watcher error, no GCS
    timeout, nothing at ERROR level, and no line of Ray Train's for each `ray.train.report` call."""
    code = (
        "from embedforge.cluster.local import start_private_cluster; import ray; "
        "from ray.train import ScalingConfig; from ray.train.torch import TorchTrainer; "
        "from embedforge.logs import configure_worker_logging; "
        "start_private_cluster(1, 256 * 1024**2); "
        "loop = lambda: (configure_worker_logging(), ray.train.report({'step': 1}), ray.train.report({'step': 2})); "
        "TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=1)).fit(); print('trained')"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "trained"
    noises = ("constructor arguments in the object store", "Timed out while waiting for GCS", "Traceback")
    for noise in (*noises, "Reporting training result"):
        assert noise not in result.stderr, result.stderr[-3000:]


def _dashboard_port() -> int:
    if local.head_running() or not local.port_owner(8265):
        return 8265
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.xdist_group("dev_head")  # with the README walk: the one development head per machine
def test_cluster_up_submit_smoke_job_down(tmp_path, monkeypatch, ray_cluster, tiny_model_dir):
    port = _dashboard_port()
    url = f"http://127.0.0.1:{port}"
    monkeypatch.setattr(local, "DASHBOARD_URL", url)
    home = tmp_path / "home"  # a fresh machine's: no ~/.ray/auth_token yet, which `ray start --head` needs
    env = {**os.environ, "EMBEDFORGE_DASHBOARD_PORT": str(port), "RAY_AUTH_MODE": local.AUTH_MODE, "HOME": str(home)}
    env.pop("RAY_ADDRESS", None)
    bare_env = {**env, "PATH": "/usr/bin:/bin"}

    def cli(*args: str, path_env: dict[str, str] = env) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, capture_output=True, text=True, env=path_env, cwd=REPO, timeout=400)

    already_up = local.head_running()
    try:
        up = cli(str(BIN / "embedforge"), "cluster", "up", "--num-cpus", "2", path_env=bare_env)
        assert up.returncode == 0, up.stderr
        assert url in up.stdout and local.dashboard_alive() and local.head_running()
        assert already_up or (home / ".ray" / "auth_token").read_text().strip()
        # the CLI reaches a head named by RAY_ADDRESS from a plain shell: no RAY_AUTH_MODE exported
        plain = {k: v for k, v in env.items() if k != "RAY_AUTH_MODE"}
        joined = cli(
            sys.executable,
            "-c",
            f"from embedforge.cluster.local import connect; import ray; connect(); {STATE_PROBE}"
            "print(int(ray.cluster_resources()['CPU']), ray.get(probe.state.remote()))",
            path_env={**plain, "RAY_ADDRESS": local.HEAD_ADDRESS},
        )
        # the head's workers read its state API beside this session's private cluster (what Ray Train's
        # placement-group monitor does), instead of timing out on whatever cluster /tmp/ray names
        assert joined.returncode == 0 and joined.stdout.strip().splitlines()[-1].split()[1:] == ["ALIVE"], (
            joined.stdout[-2000:] + joined.stderr[-2000:]
        )
        assert int(joined.stdout.strip().splitlines()[-1].split()[0]) >= 1
        # a plain shell after `make demo`: neither RAY_ADDRESS nor RAY_AUTH_MODE, the head found on its port
        for command in (
            [str(BIN / "embedforge"), "cluster", "status"],
            [sys.executable, "-c", "from embedforge.cluster.local import connect; import ray; connect(); "
             "print('joined', int(ray.cluster_resources()['CPU']))"],
        ):  # fmt: skip
            done = cli(*command, path_env=plain)
            assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
        assert done.stdout.strip().splitlines()[-1] == "joined 2"
        run_dir = tmp_path / "run"
        submission = f"embedforge-smoke-test-{os.getpid()}"
        job = cli(
            str(BIN / "ray"),
            "job",
            "submit",
            "--address",
            url,
            "--working-dir",
            ".",
            "--submission-id",
            submission,
            "--",
            "python",
            "jobs/smoke.py",
            "--run-dir",
            str(run_dir),
            "--dataset",
            "mrpc",
            "--split",
            "test",
        )
        assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
        status = cli(str(BIN / "ray"), "job", "status", "--address", url, submission)
        assert f"job '{submission}' succeeded" in (status.stdout + status.stderr).lower()

        manifest = read_manifest(run_dir / "smoke")
        assert manifest is not None and manifest["status"] == "complete"
        assert Path(manifest["python"]).parent == BIN  # the head ran the driver with this venv's python
        assert manifest["counts"]["records"] == 1725  # MANIFEST.md: mrpc test rows
        examples = read_parquet(run_dir / "smoke" / "data", TrainingExample)
        assert len(examples) == manifest["counts"]["examples"] > 0
        assert {e.task_type for e in examples} == {"pair"}
        # two replicas of 1 CPU and the gateway cannot fit the 2-CPU head: one error line at once, naming the fix
        # (the model as a folder: the head runs with a fresh HOME, whose model cache is empty)
        serve = [str(BIN / "embedforge"), "serve", "configs/tiny.yaml", "--model", str(tiny_model_dir), "--detach"]
        two = ["--set", "serve.autoscaling.min_replicas=2", "--set", "serve.autoscaling.max_replicas=2"]
        started = time.monotonic()
        refused = cli(*serve, *two, path_env=plain)
        assert refused.returncode == 1 and time.monotonic() - started < 60
        assert "Traceback" not in refused.stderr
        lines = [line for line in refused.stderr.splitlines() if line.startswith("serve error:")]
        assert len(lines) == 1 and "asks for 2.1 CPU" in lines[0] and "--set serve.num_cpus=0.5" in lines[0], lines
        served = cli(*serve, *two, "--set", "serve.num_cpus=0.5", "--set", "serve.port=0", path_env=plain)
        assert served.returncode == 0 and served.stdout.strip().startswith("http://"), served.stderr[-2000:]
        # a pipeline whose training asks for more CPUs than the head has fails before its first step, in one line
        run = [str(BIN / "embedforge"), "run", "configs/tiny.yaml", "--run-dir", str(tmp_path / "too-big")]
        too_big = cli(*run, "--set", "resources.num_cpus=8", "--set", "train.num_workers=4", path_env=plain)
        assert too_big.returncode == 1 and "Traceback" not in too_big.stderr, too_big.stderr[-2000:]
        lines = [line for line in too_big.stderr.splitlines() if line.startswith("embedforge run:")]
        assert len(lines) == 1 and "train needs 4 CPUs" in lines[0] and "cannot grow" in lines[0], lines
        assert not (tmp_path / "too-big" / "synth").exists()  # no stage started
    finally:
        if not already_up:
            down = cli(str(BIN / "embedforge"), "cluster", "down", path_env=bare_env)
            assert down.returncode == 0, down.stderr
    if not already_up:
        assert not local.head_running() and not local.dashboard_alive()
        assert local.head_processes() == []

    @ray_cluster.remote
    def still_alive() -> int:
        return 1

    assert ray_cluster.get(still_alive.remote(), timeout=120) == 1  # `cluster down` spared this private cluster


def test_a_joined_head_gets_the_token_only_when_there_is_one(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    local.use_token_auth()
    assert "RAY_AUTH_MODE" not in os.environ and "RAY_AUTH_MODE" not in local.client_env()  # no token: none sent
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("t" * 32)
    assert local.client_env()["RAY_AUTH_MODE"] == "token"  # Ray's CLI run by a command sends it
    local.use_token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    local.use_token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "disabled" == local.client_env()["RAY_AUTH_MODE"]  # the user's choice


def test_a_missing_ray_token_is_made_once_and_never_printed(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HOME", str(tmp_path))
    token_file = tmp_path / ".ray" / "auth_token"
    local.ensure_auth_token()
    token = token_file.read_text().strip()
    assert len(token) >= 16
    local.ensure_auth_token()
    assert token_file.read_text().strip() == token  # an existing token is kept
    assert token not in caplog.text
