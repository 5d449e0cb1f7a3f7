"""Shared fixtures: a private local Ray cluster per test session, prepared bundled models, the shared data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs"


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
