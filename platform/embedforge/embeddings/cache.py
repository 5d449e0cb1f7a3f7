"""A disk cache of text embeddings, shared by mining and evaluation, so re-runs and resumes reuse them.

Layout: `<root>/<namespace>/<shard>.keys.npy` + `<shard>.vecs.npy`. The namespace is a hash of the encoder's
identity (model, pooling, prefix / instruction, side); each text's key is a hash of (identity, text). A shard
holds one encoded batch; its name is a hash of its keys, so writing the same batch twice is a no-op. Vectors are
written before keys and both atomically, so a shard whose keys file exists is complete (a killed writer leaves
nothing readable). Vectors are read through memory maps that are closed again after each read: only the key
index (about 100 bytes per text) lives in memory, whatever the size of the cache.

API (sentence-transformers caches embeddings under a hash of model + texts the same way):

    cache = EmbeddingCache(root, encoder_identity(model="bundled:all-minilm-l6-v2", pooling="mean",
                                                  prefix="query: ", side="query"))
    todo = cache.missing(texts)              # indices of texts not cached yet
    cache.put([texts[i] for i in todo], vectors)
    matrix = cache.get(texts)                # (len(texts), dim) float32, KeyError if any is missing
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

KEY_BYTES = 16


def cache_root(cache_dir: str | None) -> str:
    """The embedding cache's folder: a stage's `cache_dir`, else `embeddings/` in embedforge's cache dir, which
    mining, training and evaluation then share."""
    from embedforge.paths import cache_dir as default_dir

    return str(Path(cache_dir) if cache_dir else default_dir() / "embeddings")


def model_fingerprint(ref: str) -> str:
    """`ref` plus a digest of what its weights folder holds (every file's relative path, size and modification
    time), so a model replaced at the same path or bundled name never reuses the old model's vectors. Remote
    references (an HTTP endpoint) and references that do not resolve to files are returned as they are."""
    if ref.startswith(("http://", "https://")):
        return ref
    from embedforge.models.bundled import resolve_model

    try:
        path = resolve_model(ref)
    except (FileNotFoundError, ValueError):
        return ref
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.blake2b(digest_size=8)
    for file in files:
        stat = file.stat()
        name = file.name if file == path else str(file.relative_to(path))
        digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return f"{ref}@{digest.hexdigest()}"


def encoder_identity(model: str, pooling: str = "", prefix: str = "", side: str = "", **extra: str) -> str:
    """A canonical string naming everything that changes an embedding besides the text itself."""
    return json.dumps({"model": model, "pooling": pooling, "prefix": prefix, "side": side, **extra}, sort_keys=True)


def sentence_transformers_identity(
    fingerprint: str, side: str, prefix: str, max_length: int, dtype: str = "float32"
) -> str:
    """The identity of a sentence-transformers model's vectors of `prefix + text` (no sentence-transformers prompt),
    cut at `max_length` tokens, computed in `dtype`. Mining's sentence-transformers teachers and evaluation's bare
    sentence-transformers encoders name their float32 vectors alike, so a corpus the teacher encoded in mining
    (all-MiniLM-L6-v2, the documents profile's teacher, starting model and baseline) is not encoded again when
    evaluation scores the same model; a teacher in another dtype (`mine.teachers[].dtype`) has names of its own."""
    precision = {} if dtype == "float32" else {"dtype": dtype}
    return encoder_identity(fingerprint, "sentence_transformers", prefix, side, max_length=str(max_length), **precision)


def text_key(identity: str, text: str) -> bytes:
    """The cache key of one text under one encoder identity."""
    return hashlib.blake2b(f"{identity}\x00{text}".encode(), digest_size=KEY_BYTES).digest()


class EmbeddingCache:
    """Shards of (key, vector) under one encoder identity. Safe for several writers (atomic shard files)."""

    def __init__(self, root: str | Path, identity: str) -> None:
        self.identity = identity
        namespace = hashlib.blake2b(identity.encode(), digest_size=8).hexdigest()
        self.dir = Path(root) / namespace
        self.dir.mkdir(parents=True, exist_ok=True)
        identity_file = self.dir / "identity.json"
        if not identity_file.exists():
            _atomic_save(identity_file, lambda p: p.write_text(identity))
        self._index: dict[bytes, tuple[str, int]] = {}
        self._seen: set[str] = set()
        self._published_to: set[str] = set()  # where `publish` has put the identity already

    def keys(self, texts: Sequence[str]) -> list[bytes]:
        return [text_key(self.identity, t) for t in texts]

    def refresh(self) -> None:
        """Index shards written since the last look (by this or any other process)."""
        for keys_file in sorted(self.dir.glob("*.keys.npy")):
            shard = keys_file.name.removesuffix(".keys.npy")
            if shard in self._seen:
                continue
            # keys are stored as (n, KEY_BYTES) uint8 rows: numpy's fixed-width bytes type drops trailing NULs
            for row, key in enumerate(np.load(keys_file)):
                self._index.setdefault(key.tobytes(), (shard, row))
            self._seen.add(shard)

    def __len__(self) -> int:
        self.refresh()
        return len(self._index)

    def missing(self, texts: Sequence[str]) -> list[int]:
        """Indices of `texts` that have no cached vector."""
        self.refresh()
        return [i for i, k in enumerate(self.keys(texts)) if k not in self._index]

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> str | None:
        """Store one batch; returns the shard name (None for an empty batch)."""
        if len(texts) != len(vectors):
            raise ValueError(f"put: {len(texts)} texts but {len(vectors)} vectors")
        if not texts:
            return None
        keys = np.frombuffer(b"".join(self.keys(texts)), dtype=np.uint8).reshape(len(texts), KEY_BYTES)
        shard = hashlib.blake2b(keys.tobytes(), digest_size=12).hexdigest()
        vecs_file, keys_file = self.dir / f"{shard}.vecs.npy", self.dir / f"{shard}.keys.npy"
        if not keys_file.exists():
            _atomic_save(vecs_file, lambda p: np.save(p, np.ascontiguousarray(vectors, dtype=np.float32)))
            _atomic_save(keys_file, lambda p: np.save(p, keys))
        return shard

    def publish(self, shard: str, uri: str) -> None:
        """Copy one shard (vectors, then keys) and the identity to the folder at `uri` (`<uri>/<namespace>/`), from
        where `pull_published` brings it into another node's cache; a shard whose keys arrived is complete."""
        from embedforge.runs.store import RunStore

        store = RunStore(uri)
        names = [f"{shard}.vecs.npy", f"{shard}.keys.npy"]
        if uri not in self._published_to:
            names.insert(0, "identity.json")
            self._published_to.add(uri)
        for name in names:
            store.put(self.dir / name, f"{self.dir.name}/{name}")

    def get(self, texts: Sequence[str]) -> np.ndarray:
        """Cached vectors of `texts` in order; KeyError naming how many (and one example) are missing."""
        self.refresh()
        keys = self.keys(texts)
        absent = [i for i, k in enumerate(keys) if k not in self._index]
        if absent:
            raise KeyError(
                f"{len(absent)} of {len(texts)} texts are not in the cache {self.dir}, e.g. {texts[absent[0]]!r}"
            )
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        by_shard: dict[str, tuple[list[int], list[int]]] = {}
        for i, key in enumerate(keys):
            shard, row = self._index[key]
            positions, rows = by_shard.setdefault(shard, ([], []))
            positions.append(i)
            rows.append(row)
        # each shard's rows copied out of a map that closes right after: no shard stays mapped
        parts = [
            (positions, np.load(self.dir / f"{shard}.vecs.npy", mmap_mode="r")[rows])
            for shard, (positions, rows) in by_shard.items()
        ]
        out = np.empty((len(keys), parts[0][1].shape[1]), dtype=np.float32)
        for positions, vectors in parts:
            out[positions] = vectors
        return out


def pull_published(uri: str, root: str | Path) -> int:
    """Bring the shards published at `uri` (`EmbeddingCache.publish`) into the cache at `root`; returns how many
    files were copied. A shard is complete once its keys file is there, so one still being published is skipped."""
    from embedforge.runs.store import RunStore

    store = RunStore(uri)
    listing = store.files()
    shards = {rel.removesuffix(".keys.npy") for rel in listing if rel.endswith(".keys.npy")}
    complete = {
        rel: info
        for rel, info in listing.items()
        if rel.endswith("identity.json") or rel.removesuffix(".keys.npy").removesuffix(".vecs.npy") in shards
    }
    return store.pull(Path(root), remote=complete)


def _atomic_save(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")
    if path.suffix == ".npy":
        tmp = tmp.with_suffix(".npy")  # np.save appends .npy otherwise
    write(tmp)
    tmp.replace(path)
