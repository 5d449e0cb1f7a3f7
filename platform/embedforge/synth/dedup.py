"""Exact and near-duplicate removal for synthetic examples.

Exact duplicates share a normalised (query, positive) key; near duplicates have a query embedding whose cosine
similarity to an already kept one reaches the threshold (embedded with the bundled all-MiniLM-L6-v2). Generators
repeat themselves, more so small ones at low temperature; NV-Embed (seed 000) 4.3 and LGAI (seed 003) 3
deduplicate their training data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from embedforge.synth.validate import normalize

Embed = Callable[[Sequence[str]], np.ndarray]


def exact_key(query: str, positive: str) -> str:
    return normalize(query) + "\x1f" + normalize(positive)


def near_duplicates(new: np.ndarray, kept: np.ndarray, threshold: float) -> list[bool]:
    """For L2-normalised rows of `new`, in order: True when the row is within `threshold` cosine similarity of a
    row of `kept` or of an earlier non-duplicate row of `new` (greedy, first one wins)."""
    flags: list[bool] = []
    pool = [kept] if len(kept) else []
    accepted: list[np.ndarray] = []
    base = np.concatenate(pool) if pool else np.zeros((0, new.shape[1]), dtype=np.float32)
    for vec in new:
        sims = [base @ vec] if len(base) else []
        if accepted:
            sims.append(np.stack(accepted) @ vec)
        dup = any(len(s) and float(s.max()) >= threshold for s in sims)
        flags.append(dup)
        if not dup:
            accepted.append(vec)
    return flags


class Deduplicator:
    """Keeps state across shards: exact keys and query embeddings of everything kept so far."""

    def __init__(self, embed: Embed, threshold: float, dimension: int) -> None:
        self.embed = embed
        self.threshold = threshold
        self.keys: set[str] = set()
        self.vectors = np.zeros((0, dimension), dtype=np.float32)

    def filter(self, queries: list[str], positives: list[str]) -> list[str | None]:
        """Per item: None when kept (and remembered), else the drop reason."""
        reasons: list[str | None] = []
        fresh: list[int] = []
        for i, key in enumerate(exact_key(q, p) for q, p in zip(queries, positives, strict=True)):
            if key in self.keys:
                reasons.append("exact_duplicate")
                continue
            self.keys.add(key)
            reasons.append(None)
            fresh.append(i)
        if fresh:
            vecs = np.asarray(self.embed([queries[i] for i in fresh]), dtype=np.float32)
            flags = near_duplicates(vecs, self.vectors, self.threshold)
            for i, dup in zip(fresh, flags, strict=True):
                if dup:
                    reasons[i] = "near_duplicate"
            keep = [k for k, dup in enumerate(flags) if not dup]
            self.vectors = np.concatenate([self.vectors, vecs[keep]])
        return reasons


def encoder_embedder(model_ref: str) -> tuple[Embed, int]:
    """Any `TextEncoder` (e.g. bundled:all-minilm-l6-v2) as an Embed over bare texts, with its dimension."""
    from embedforge.model import load_encoder

    encoder = load_encoder(model_ref)
    return (lambda texts: encoder.encode_documents(list(texts), batch_size=64)), encoder.dimension
