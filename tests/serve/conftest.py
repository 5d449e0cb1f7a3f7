"""A live embedforge deployment of the real MiniLM model on the session's private Ray cluster (free HTTP port)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

KEYS_ENV = "EMBEDFORGE_TEST_API_KEYS"
KEY = "ef-test-key-7Qx2"
MODEL_NAME = "minilm-test"

TEST_SERVE = {
    "name": "ef-test",
    "model_name": MODEL_NAME,
    "num_cpus": 0.25,
    "torch_threads": 1,
    "api_keys_env": KEYS_ENV,
    "limits": {
        "max_inputs": 32,
        "max_chars_per_input": 2000,
        "max_tokens_per_input": 64,
        "on_too_long": "reject",
        "max_body_bytes": 65536,
    },
    "batching": {"max_batch_tokens": 4096},
    "autoscaling": {
        "min_replicas": 1,
        "max_replicas": 2,
        "target_ongoing_requests": 2,
        "upscale_delay_s": 1,
        "downscale_delay_s": 4,
        "metrics_interval_s": 0.5,
        "look_back_period_s": 2,
    },
}


@dataclass
class Served:
    url: str
    key: str
    model_name: str
    app_name: str


def serve_test_config(**changes):
    """The test deployment's serve section, with top-level changes."""
    from embedforge.config.serve import ServeConfig

    return ServeConfig.model_validate({**TEST_SERVE, **changes})


@pytest.fixture(scope="package")
def served(ray_cluster, minilm_dir) -> Served:
    """Deployed once for the serve tests (a package, so the fixture ends with them) and deleted after the last, so
    its replica's CPU goes back to the session's cluster before the tests that need all of it."""
    from ray import serve

    from embedforge.serve.deploy import deploy

    os.environ[KEYS_ENV] = f"other-key,{KEY}"
    config = serve_test_config()
    url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=180)
    yield Served(url, KEY, MODEL_NAME, config.name)
    serve.delete(config.name)


@pytest.fixture(scope="session")
def direct_encoder(minilm_dir):
    from embedforge.model import load_encoder

    return load_encoder("bundled:all-minilm-l6-v2")


@pytest.fixture(scope="module")
def overload_served(served) -> Served:
    """A second app on the same Serve proxy that admits one request and queues one more."""
    from ray import serve

    from embedforge.serve.deploy import deploy

    config = serve_test_config(
        name="ef-overload",
        route_prefix="/overload",
        max_ongoing_requests=1,
        max_queued_requests=1,
        autoscaling={"min_replicas": 1, "max_replicas": 1},
    )
    url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=180)
    yield Served(url, KEY, MODEL_NAME, config.name)
    serve.delete(config.name)


@pytest.fixture(scope="module")
def two_replicas(ray_cluster, minilm_dir) -> Served:
    """An app whose model deployment keeps two replicas (for killing one)."""
    from ray import serve

    from embedforge.serve.deploy import deploy

    os.environ[KEYS_ENV] = f"other-key,{KEY}"
    config = serve_test_config(
        name="ef-failover", route_prefix="/failover", autoscaling={"min_replicas": 2, "max_replicas": 2}
    )
    url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=180)
    yield Served(url, KEY, MODEL_NAME, config.name)
    serve.delete(config.name)


@pytest.fixture(scope="module")
def key_file_served(ray_cluster, minilm_dir, tmp_path_factory):
    """An app whose keys come from a file the gateway reads again every second; yields (Served, the file)."""
    from ray import serve

    from embedforge.serve.deploy import deploy

    keys = tmp_path_factory.mktemp("keys") / "api_keys"
    keys.write_text(f"{KEY}\n")
    config = serve_test_config(
        name="ef-keyfile",
        route_prefix="/keyfile",
        api_keys_env=None,
        api_keys_file=str(keys),
        api_keys_reload_s=1.0,
        autoscaling={"min_replicas": 1, "max_replicas": 1},
    )
    url = deploy(config, "bundled:all-minilm-l6-v2", port=0, wait_ready_s=180)
    yield Served(url, KEY, MODEL_NAME, config.name), keys
    serve.delete(config.name)


@pytest.fixture
def interrupted_deploy():
    """The serve config of an app whose first deploy a test interrupts, and its key."""
    os.environ[KEYS_ENV] = f"other-key,{KEY}"
    return serve_test_config(
        name="ef-interrupted", route_prefix="/interrupted", autoscaling={"min_replicas": 1, "max_replicas": 1}
    ), KEY
