"""Run directories, data and models at a URI: `s3://`, `gs://`, any filesystem `pyarrow.fs` knows, or a local path.

Every stage reads and writes local files. When a run directory is a URI, a stage works in a mirror of it on the
node that runs the stage (under `EMBEDFORGE_SCRATCH`, default `~/.cache/embedforge/scratch`): `staged()` pulls
what the store has that the mirror lacks before the stage (upstream outputs, and the stage's own shards when it
resumes), and pushes what the stage changed when it ends, failed or not, so a stage on another node, a resumed
run or a later `embedforge eval` reads the run from the store, never from another node's disk. A push also
removes from the store what the stage removed (stale shards of an earlier config), so the store stays a copy of
the mirror. Data files and model folders named by a URI are pulled into the scratch once and read from there.

Credentials and endpoints come from the environment, as pyarrow and Ray Train read them (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for an S3-compatible server; GOOGLE_APPLICATION_CREDENTIALS for GCS).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

STORE_MARKER = ".store-uri"  # in a mirror's root: the URI it mirrors
_COPY_CHUNK = 8 * 2**20


# mining's teacher vectors of a run (`RUN/embeddings`): the actors publish them to the store and the mining driver
# pulls them into its embedding cache (`embeddings.cache.pull_published`), so no stage's mirror holds a copy
PUBLISHED_EMBEDDINGS = "embeddings"
NOT_MIRRORED = (f"{PUBLISHED_EMBEDDINGS}/",)

STORE_SCHEMES = ("s3://", "gs://", "gcs://", "hdfs://", "viewfs://", "abfs://", "abfss://")


def is_remote(location: str | Path) -> bool:
    """True for a URI in object storage or HDFS (a run dir, data file or model folder in a store)."""
    return str(location).startswith(STORE_SCHEMES)


def scratch_root() -> Path:
    """This node's scratch space for mirrors of remote run dirs, data and models."""
    env = os.environ.get("EMBEDFORGE_SCRATCH")
    return Path(env).resolve() if env else Path.home() / ".cache" / "embedforge" / "scratch"


def _key(uri: str) -> str:
    return hashlib.sha256(uri.encode()).hexdigest()[:16]


class RunStore:
    """A folder in a `pyarrow.fs` filesystem, synchronised file by file with a local folder.

    A file is copied when the other side lacks it, has another size, or holds an older copy (modification times;
    a pulled file takes the store's time, so it is not pushed back unchanged)."""

    def __init__(self, uri: str) -> None:
        from pyarrow import fs

        self.uri = uri.rstrip("/")
        self.fs, self.root = fs.FileSystem.from_uri(self.uri)

    def child(self, sub: str) -> str:
        return f"{self.uri}/{sub.strip('/')}" if sub else self.uri

    def _remote(self, sub: str) -> str:
        return f"{self.root}/{sub.strip('/')}" if sub else self.root

    def files(self, sub: str = "") -> dict[str, tuple[int, float]]:
        """Relative path -> (size, mtime in seconds) of every file under `sub` in the store."""
        from pyarrow import fs

        base = self._remote(sub)
        info = self.fs.get_file_info(base)
        if info.type == fs.FileType.File:
            return {"": (info.size, info.mtime.timestamp() if info.mtime else 0.0)}
        selector = fs.FileSelector(base, recursive=True, allow_not_found=True)
        out = {}
        for item in self.fs.get_file_info(selector):
            if item.type == fs.FileType.File:
                out[item.path[len(base) + 1 :]] = (item.size, item.mtime.timestamp() if item.mtime else 0.0)
        return out

    def pull(
        self, local: Path, sub: str = "", exact: bool = False, remote: dict[str, tuple[int, float]] | None = None
    ) -> int:
        """Copy what `sub` in the store holds newer or more of into `local` (a folder, or a file for a file);
        `exact` also deletes the local files the store does not have; `remote` is `files(sub)` when the caller
        listed it already. Returns the number of files copied."""
        copied = 0
        remote = self.files(sub) if remote is None else remote
        if exact and local.is_dir():
            for path in [p for p in local.rglob("*") if p.is_file()]:
                if str(path.relative_to(local)) not in remote:
                    path.unlink()
        for rel, (size, mtime) in remote.items():
            target = local / rel if rel else local
            if target.is_file() and target.stat().st_size == size and target.stat().st_mtime >= mtime:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.pull-{os.getpid()}")
            source = f"{self._remote(sub)}/{rel}" if rel else self._remote(sub)
            with self.fs.open_input_stream(source) as src, tmp.open("wb") as dst:
                shutil.copyfileobj(src, dst, _COPY_CHUNK)
            os.utime(tmp, (mtime, mtime))
            tmp.replace(target)
            copied += 1
        return copied

    def put(self, path: Path, rel: str) -> None:
        """Upload one local file to `rel` under the store's folder."""
        with path.open("rb") as src, self.fs.open_output_stream(self._remote(rel)) as dst:
            shutil.copyfileobj(src, dst, _COPY_CHUNK)

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Write `data` as the file `rel` under the store's folder."""
        with self.fs.open_output_stream(self._remote(rel)) as dst:
            dst.write(data)

    def delete(self, rel: str) -> None:
        """Remove one file from the store, if it is there."""
        from pyarrow import fs

        if self.fs.get_file_info(self._remote(rel)).type == fs.FileType.File:
            self.fs.delete_file(self._remote(rel))

    def push(self, local: Path, sub: str = "", deletable: Collection[str] = ()) -> tuple[int, int]:
        """Upload the folder `local`'s new and changed files to `sub`, and delete the files of `deletable` (paths
        the store held when the mirror was pulled) that `local` no longer has; files that reached the store
        directly meanwhile (Ray Train's checkpoints) stay. Returns (uploaded, deleted)."""
        remote = self.files(sub)
        files = {str(p.relative_to(local)): p for p in local.rglob("*") if p.is_file()} if local.is_dir() else {}
        uploaded = 0
        for rel, path in files.items():
            if rel == STORE_MARKER or (path.name.startswith(".") and ".pull-" in path.name):
                continue
            stat = path.stat()
            have = remote.get(rel)
            # object stores keep whole seconds: a copy uploaded in the second the file was last written is current
            if have is not None and have[0] == stat.st_size and have[1] >= math.floor(stat.st_mtime):
                continue
            self.put(path, f"{sub}/{rel}" if sub else rel)
            uploaded += 1
        stale = sorted((set(remote) & set(deletable)) - set(files))
        for rel in stale:
            self.fs.delete_file(f"{self._remote(sub)}/{rel}")
        return uploaded, len(stale)


def mirror_of(uri: str) -> Path:
    """The local mirror of the run dir at `uri` on this node (created, and marked with the URI it mirrors)."""
    uri = uri.rstrip("/")
    local = scratch_root() / "runs" / _key(uri)
    local.mkdir(parents=True, exist_ok=True)
    (local / STORE_MARKER).write_text(uri)
    return local


def store_of(run_dir: str | Path) -> RunStore | None:
    """The store a local run dir mirrors (None for a run dir that is the run itself)."""
    marker = Path(run_dir) / STORE_MARKER
    return RunStore(marker.read_text().strip()) if marker.is_file() else None


@contextmanager
def staged(run_dir: str | Path) -> Iterator[Path]:
    """The local folder to run a stage in: `run_dir` itself when local; for a URI, its mirror on this node,
    pulled from the store first (all but `NOT_MIRRORED`) and pushed back when the block ends, whether it
    succeeded or not."""
    if not is_remote(run_dir):
        local = Path(run_dir).expanduser().resolve()
        local.mkdir(parents=True, exist_ok=True)
        yield local
        return
    store = RunStore(str(run_dir))
    local = mirror_of(store.uri)
    listing = {rel: info for rel, info in store.files().items() if not rel.startswith(NOT_MIRRORED)}
    present = set(listing)  # what the store keeps unmirrored is never deleted by a push either
    pulled = store.pull(local, remote=listing)
    log.info("run dir %s: mirror %s, %d file(s) pulled", store.uri, local, pulled)
    try:
        yield local
    finally:
        uploaded, deleted = store.push(local, deletable=present)
        log.info("run dir %s: %d file(s) pushed, %d removed", store.uri, uploaded, deleted)


def local_copy(uri: str) -> Path:
    """A local path for a data file or model folder named by `uri`, pulled into this node's scratch (only what
    changed since the last pull). The name keeps its last part, so readers still see `.jsonl` or `.parquet`."""
    uri = uri.rstrip("/")
    store = RunStore(uri)
    target = scratch_root() / "inputs" / _key(uri) / uri.rsplit("/", 1)[-1]
    if store.pull(target) == 0 and not target.exists():
        raise FileNotFoundError(f"{uri}: nothing there")
    return target
