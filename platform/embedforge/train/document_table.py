"""The fixed vectors of every document a frozen-document run trains on (`model.frozen_documents`).

With the document side frozen, a document's vector never changes during training, so each one is encoded once,
before the first step, by the frozen starting model: the collection (`mine.corpus`) and every asymmetric example's
positive and negatives. They are read from the embedding cache under the starting model's own identity
(`model/frozen_documents.py`), where mining's teacher of that model, or an earlier run, put them; only the missing
ones are encoded. Steps then look documents up instead of running them through the model, and
`distill.over: collection` scores every query against all of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from embedforge.data.schema import TrainingExample, is_symmetric
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.model.embedder import Embedder

log = logging.getLogger(__name__)


def frozen_document_texts(examples: Iterable[TrainingExample], collection: Sequence[str] = ()) -> list[str]:
    """The documents a run looks up, each once: the collection's, then the asymmetric examples' own (symmetric
    tasks encode documents with the trained side)."""
    texts = dict.fromkeys(collection)
    for ex in examples:
        if not is_symmetric(ex.task_type):
            texts.update(dict.fromkeys([ex.positive, *ex.negatives]))
    return list(texts)


class DocumentTable:
    """Vectors (N, d) of N distinct document texts, looked up by text."""

    def __init__(self, texts: Sequence[str], vectors: torch.Tensor) -> None:
        if len(texts) != len(vectors):
            raise ValueError(f"document table: {len(texts)} texts but {len(vectors)} vectors")
        self.rows = {text: i for i, text in enumerate(texts)}
        self.vectors = vectors

    @classmethod
    def build(cls, embedder: Embedder, texts: Sequence[str], cache_root: str, batch_size: int = 64) -> DocumentTable:
        """Encode `texts` with the embedder's frozen document side, through the embedding cache."""
        started = time.time()
        cache = EmbeddingCache(cache_root, embedder.frozen_document_identity())
        missing = cache.missing(texts)
        if missing:
            todo = [texts[i] for i in missing]
            cache.put(todo, embedder.encode_documents(todo, batch_size=batch_size))
        vectors = torch.from_numpy(np.ascontiguousarray(cache.get(texts), dtype=np.float32))
        log.info(
            "frozen documents: %d vectors (%d read from the cache, %d encoded) in %.1fs",
            len(texts),
            len(texts) - len(missing),
            len(missing),
            time.time() - started,
        )
        return cls(texts, vectors.to(embedder.device))

    def indices(self, texts: Sequence[str]) -> torch.Tensor:
        """Row of each text; KeyError naming a text the table lacks."""
        try:
            rows = [self.rows[t] for t in texts]
        except KeyError as err:
            raise KeyError(f"document not among the run's frozen document vectors: {err.args[0][:80]!r}") from err
        return torch.tensor(rows, dtype=torch.long, device=self.vectors.device)

    def lookup(self, texts: Sequence[str]) -> torch.Tensor:
        return self.vectors[self.indices(texts)]
