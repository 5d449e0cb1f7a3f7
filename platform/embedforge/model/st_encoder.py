"""A sentence-transformers folder as a `TextEncoder` (e.g. the all-MiniLM-L6-v2 teacher and baseline).

Instructions: if the folder was exported by embedforge (it holds `embedforge_instructions.json`), queries (and
documents of symmetric tasks) get the same instruction prefix embedforge uses, passed as the ST `prompt` so it is
excluded from pooling. Other models get the prompts their folder names (E5's `query: ` / `passage: `; symmetric
tasks encode documents as queries, as E5 does for STS) and no task instruction, which they were not trained with;
a folder without prompts (all-MiniLM-L6-v2) encodes texts bare. BERT-family ones run without their padding tokens
(`unpadded.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedforge.config.model import InstructionConfig
from embedforge.embeddings.cache import sentence_transformers_identity
from embedforge.model.backbone_spec import BackboneSpec, read_backbone_spec
from embedforge.model.instructions import render_prefix
from embedforge.model.protocol import Demonstration

INSTRUCTIONS_FILE = "embedforge_instructions.json"


class SentenceTransformerEncoder:
    def __init__(self, path: Path, name: str | None = None, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        from embedforge.model.unpadded import UnpaddedBert

        # trust_remote_code only for embedforge's custom-module exports: ST 6 imports outside module classes only so
        own_export = "embedforge." in (path / "modules.json").read_text()
        self.model = SentenceTransformer(str(path), device=device, local_files_only=True, trust_remote_code=own_export)
        self.name = name or path.name
        spec = path / INSTRUCTIONS_FILE
        self.instructions = InstructionConfig.model_validate_json(spec.read_text()) if spec.is_file() else None
        self.spec = None if self.instructions else folder_spec(path)
        self.unpadded = None if self.instructions else UnpaddedBert.of(self.model)

    def own_prefix(self, side: str, task: str | None) -> str:
        return self.spec.own_prefix(side, task) if self.spec is not None else ""

    def cache_identity(self, fingerprint: str, side: str, task: str | None) -> str | None:
        """The folder's vectors as mining's teachers name them (`folder_identity`); None for an embedforge export,
        whose settings name its vectors."""
        return None if self.spec is None else folder_identity(fingerprint, self.spec, side, task)

    @property
    def tokenizer(self):
        """The model's tokenizer (serving counts and limits tokens with it)."""
        return self.model.tokenizer

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def _encode(self, texts: Sequence[str], prompt: str | None, batch_size: int, kind: str) -> np.ndarray:
        if self.unpadded is not None and (not prompt or self.spec is None or self.spec.pools_prompt):
            return self.unpadded.encode([(prompt or "") + t for t in texts], batch_size)
        # embedforge exports cut queries and documents at their own maximum lengths, which ST picks by `task`
        extra = {"task": kind} if self.instructions else {}
        out = self.model.encode(
            list(texts), prompt=prompt, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, **extra
        )
        return np.asarray(out, dtype=np.float32).reshape(len(texts), self.dimension)

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        if self.instructions is None:
            return self._encode(texts, self.own_prefix("query", task), batch_size, "query")
        return self._encode(texts, render_prefix(self.instructions, task, examples), batch_size, "query")

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        if self.instructions is None:
            return self._encode(texts, self.own_prefix("document", task), batch_size, "document")
        return self._encode(texts, render_prefix(self.instructions, task) if task else None, batch_size, "document")


def folder_spec(path: Path) -> BackboneSpec | None:
    """The folder's spec (its prompts, pooling and length), or None for an architecture embedforge does not load
    itself, which is then encoded bare and never shares vectors."""
    try:
        return read_backbone_spec(path)
    except (ValueError, FileNotFoundError):
        return None


def plain_folder_spec(ref: str) -> BackboneSpec | None:
    """The spec of `ref` when it is a sentence-transformers folder that `load_encoder` encodes as it is (not an
    embedforge export or model folder); None otherwise."""
    from embedforge.models.bundled import resolve_model

    try:
        path = resolve_model(ref)
    except (FileNotFoundError, ValueError):
        return None
    if not (path / "modules.json").is_file() or (path / INSTRUCTIONS_FILE).is_file():
        return None
    return folder_spec(path)


def folder_identity(fingerprint: str, spec: BackboneSpec, side: str, task: str | None) -> str | None:
    """The cache identity of a sentence-transformers folder used as it is: `own prefix + text` cut at the folder's
    length, named as mining's sentence-transformers teachers name `prefix + text`. Evaluation, mining's teachers of
    the folder and a frozen document side started from it (`model.frozen_documents`) all name its vectors so, and
    read back the collection one of them encoded. None where the vectors are not those (a Pooling that leaves the
    prompt out, no known length)."""
    if spec.prompts is None or spec.pools_prompt is False or spec.max_seq_length is None:
        return None
    return sentence_transformers_identity(fingerprint, side, spec.own_prefix(side, task), spec.max_seq_length)


def write_instructions(directory: Path, instructions: InstructionConfig) -> None:
    (directory / INSTRUCTIONS_FILE).write_text(json.dumps(instructions.model_dump(), indent=2) + "\n")
