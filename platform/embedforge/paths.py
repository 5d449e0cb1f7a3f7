"""Where things live: the repository, the shared data, the model cache, and bundled-model references."""

from __future__ import annotations

import os
from pathlib import Path

from embedforge.runs.store import is_remote, local_copy

REPO_ROOT = Path(__file__).resolve().parents[2]
BUNDLED_PREFIX = "bundled:"


def data_dir() -> Path:
    """The real public data (../shared/data beside the repository), or $EMBEDFORGE_DATA_DIR."""
    env = os.environ.get("EMBEDFORGE_DATA_DIR")
    return Path(env).resolve() if env else (REPO_ROOT.parent / "shared" / "data").resolve()


def cache_dir() -> Path:
    """Prepared models and embedding caches: $EMBEDFORGE_CACHE or ~/.cache/embedforge."""
    env = os.environ.get("EMBEDFORGE_CACHE")
    return Path(env).resolve() if env else Path.home() / ".cache" / "embedforge"


def models_dir() -> Path:
    return cache_dir() / "models"


def resolve_data_path(path: str, base: Path | None = None) -> Path:
    """Relative data paths are taken against $EMBEDFORGE_DATA_DIR (or ../shared/data), or `base` if given; a URI
    (s3://, gs://) is copied to this node's scratch and read there."""
    if is_remote(path):
        return local_copy(path)
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    return ((base or data_dir()) / p).resolve()
