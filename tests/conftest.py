"""Shared fixtures: a private local Ray cluster per test session, prepared bundled models, the shared data, and a
local S3-compatible server (moto's server mode) for run dirs in object storage."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """Loads a script of benchmarks/ as a module: `load_benchmark("generalize")`. The scripts put benchmarks/ on
    sys.path for their own imports (`from common import ...`); that is undone once the script is loaded."""

    def load(name: str) -> ModuleType:
        saved = list(sys.path)
        sys.path.insert(0, str(REPO / "benchmarks"))
        try:
            spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "benchmarks" / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        finally:
            sys.path[:] = saved
        return module

    return load


@pytest.fixture(scope="session")
def ray_cluster():
    """A private local Ray cluster (never the dev head on :8265), shut down at the end of the session."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            object_store_memory=1024**3,
            include_dashboard=False,
            log_to_driver=False,
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare(["tiny-llama"])["tiny-llama"]


@pytest.fixture(scope="session")
def tiny_bert_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare(["tiny-bert"])["tiny-bert"]


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare(["smollm2-135m-instruct"])["smollm2-135m-instruct"]


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare(["all-minilm-l6-v2"])["all-minilm-l6-v2"]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    from embedforge.paths import data_dir

    path = data_dir()
    assert path.is_dir(), f"shared data not found at {path} (set EMBEDFORGE_DATA_DIR)"
    return path


@pytest.fixture
def tiny_config():
    from embedforge.config import load_config

    return load_config(CONFIGS / "tiny.yaml")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[dict[str, str]]:
    """moto's S3 server on 127.0.0.1 (a free port), started for the session; yields the environment that points
    pyarrow, Ray Train and boto3 at it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = (tmp_path_factory.mktemp("moto") / "server.log").open("w")
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"moto's S3 server did not start; see {log.name}")
            time.sleep(0.5)
    yield {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }
    proc.terminate()
    proc.wait(timeout=30)
    log.close()


@pytest.fixture(scope="session")
def make_bucket(s3_server) -> Callable[[], str]:
    """Creates a fresh bucket on the test S3 server and returns its s3:// URI."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_server["AWS_ENDPOINT_URL"],
        aws_access_key_id=s3_server["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3_server["AWS_SECRET_ACCESS_KEY"],
        region_name=s3_server["AWS_DEFAULT_REGION"],
    )

    def make() -> str:
        name = f"embedforge-{uuid.uuid4().hex[:12]}"
        client.create_bucket(Bucket=name)
        return f"s3://{name}"

    return make


@pytest.fixture
def s3_bucket(s3_server, make_bucket, monkeypatch, tmp_path) -> str:
    """A fresh bucket, with this process's environment pointed at the server and its scratch under tmp_path."""
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("EMBEDFORGE_SCRATCH", str(tmp_path / "scratch"))
    return make_bucket()
