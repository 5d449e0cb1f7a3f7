"""A sentence-transformers folder as a `TextEncoder` (e.g. the all-MiniLM-L6-v2 teacher and baseline).

Instructions: if the folder was exported by embedforge (it holds `embedforge_instructions.json`), queries (and
documents of symmetric tasks) get the same instruction prefix embedforge uses, passed as the ST `prompt` so it is
excluded from pooling. Other models were not trained with instructions, so texts are encoded bare, and BERT-family
ones (all-MiniLM-L6-v2) without their padding tokens (`unpadded.py`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedforge.config.model import InstructionConfig
from embedforge.model.instructions import render_prefix
from embedforge.model.protocol import Demonstration
from embedforge.model.unpadded import UnpaddedBert

INSTRUCTIONS_FILE = "embedforge_instructions.json"


class SentenceTransformerEncoder:
    def __init__(self, path: Path, name: str | None = None, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer

        # trust_remote_code only for embedforge's custom-module exports: ST 6 imports outside module classes only so
        own_export = "embedforge." in (path / "modules.json").read_text()
        self.model = SentenceTransformer(str(path), device=device, local_files_only=True, trust_remote_code=own_export)
        self.name = name or path.name
        spec = path / INSTRUCTIONS_FILE
        self.instructions = InstructionConfig.model_validate_json(spec.read_text()) if spec.is_file() else None
        self.unpadded = None if self.instructions else UnpaddedBert.of(self.model)

    @property
    def bare_max_length(self) -> int | None:
        """For a model that encodes every text bare (no instruction, prompt or demonstrations, whatever the task):
        the token length it cuts texts at, which with its weights is all that shapes a vector; None for an
        embedforge export, whose instructions depend on the task."""
        return None if self.instructions else int(self.model.max_seq_length)

    @property
    def tokenizer(self):
        """The model's tokenizer (serving counts and limits tokens with it)."""
        return self.model.tokenizer

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def _encode(self, texts: Sequence[str], prompt: str | None, batch_size: int, kind: str) -> np.ndarray:
        if self.unpadded is not None and prompt is None:
            return self.unpadded.encode(texts, batch_size)
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
        prompt = render_prefix(self.instructions, task, examples) if self.instructions else None
        return self._encode(texts, prompt, batch_size, "query")

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        prompt = render_prefix(self.instructions, task) if self.instructions and task else None
        return self._encode(texts, prompt, batch_size, "document")


def write_instructions(directory: Path, instructions: InstructionConfig) -> None:
    (directory / INSTRUCTIONS_FILE).write_text(json.dumps(instructions.model_dump(), indent=2) + "\n")
