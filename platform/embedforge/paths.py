"""Where things live: the repository, the shared data, the model cache, and bundled-model references."""

from __future__ import annotations

import os
from pathlib import Path

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


def resolve_model(ref: str) -> Path:
    """Turn `bundled:NAME` into its prepared folder, anything else into a path; fail clearly if missing."""
    if ref.startswith(BUNDLED_PREFIX):
        name = ref[len(BUNDLED_PREFIX) :]
        from embedforge.models.bundled import BUNDLED

        if name not in BUNDLED:
            raise ValueError(f"unknown bundled model {name!r}; known: {sorted(BUNDLED)}")
        path = models_dir() / name
        if not (path / ".complete").is_file():
            raise FileNotFoundError(
                f"bundled model {name!r} is not prepared at {path}: run `embedforge models prepare`"
            )
        return path
    path = Path(ref).expanduser().resolve()
    if not path.exists():
        raise FileNotFoundError(f"model path {path} does not exist")
    return path


def resolve_data_path(path: str, base: Path | None = None) -> Path:
    """Relative data paths are taken against $EMBEDFORGE_DATA_DIR (or ../shared/data), or `base` if given."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    return ((base or data_dir()) / p).resolve()
