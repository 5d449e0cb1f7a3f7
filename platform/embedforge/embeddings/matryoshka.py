"""Embeddings cut to their first d coordinates and renormalised: what serving answers a request's `dimensions`
with (OpenAI's parameter) and what evaluation scores with `evaluate.dimensions`, for any model; `train.matryoshka`
trains for chosen sizes (Matryoshka Representation Learning, Kusupati et al., NeurIPS 2022). What a cut costs is
measured in docs/quality.md, "Serving fewer dimensions".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embedforge.model.protocol import Demonstration, TextEncoder


def truncate_dimensions(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """The first `dimensions` coordinates of each row, L2-normalised (float32); the rows as they are for None or
    the full width."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    cut = vectors[:, :dimensions]
    norms = np.linalg.norm(cut, axis=1, keepdims=True)
    return (cut / np.maximum(norms, 1e-12)).astype(np.float32)


class TruncatedEncoder:
    """`encoder` with every vector cut to `dimensions` (`truncate_dimensions`), fewer than its own."""

    def __init__(self, encoder: TextEncoder, dimensions: int, name: str | None = None) -> None:
        if not 0 < dimensions < encoder.dimension:
            raise ValueError(
                f"{encoder.name}: {dimensions} dimensions is not a size its {encoder.dimension}-dimensional vectors "
                "can be cut to: it must be below their width"
            )
        self.encoder, self.dimensions = encoder, dimensions
        self.name = name or encoder.name

    @property
    def dimension(self) -> int:
        return self.dimensions

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        vectors = self.encoder.encode_queries(texts, task=task, batch_size=batch_size, examples=examples)
        return truncate_dimensions(vectors, self.dimensions)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        vectors = self.encoder.encode_documents(texts, task=task, batch_size=batch_size)
        return truncate_dimensions(vectors, self.dimensions)
