"""What every embedder offers to mining, evaluation and serving, whatever its kind.

Implementations: the LLM embedder (`embedforge.model.embedder.Embedder`), a sentence-transformers folder, and an
HTTP `/v1/embeddings` endpoint. `task` is the instruction text; given to `encode_documents` it means the task is
symmetric (STS, classification, clustering) and documents get the instruction too (NV-Embed 4). `examples` are
in-context (query, positive) demonstrations placed before a query's instruction (LGAI-Embedding 4.2); a model
without an instruction template (a plain sentence-transformers model) was never trained with them and ignores them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

Demonstration = tuple[str, str]


@runtime_checkable
class TextEncoder(Protocol):
    name: str

    @property
    def dimension(self) -> int: ...

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        """L2-normalised float32 array (len(texts), dimension); queries get the task instruction, after `examples`."""
        ...

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        """L2-normalised float32 array (len(texts), dimension); bare unless `task` is given (symmetric tasks)."""
        ...
