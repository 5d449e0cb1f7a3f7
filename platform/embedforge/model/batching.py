"""Length-sorted batching for inference: similar lengths share a batch, so little compute goes to padding."""

from __future__ import annotations

from collections.abc import Sequence


def length_sorted_batches(texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """Indices of `texts` grouped into batches of `batch_size`, longest texts first (errors surface early)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]), reverse=True)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
