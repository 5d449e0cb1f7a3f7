"""From a planned batch to model inputs and loss targets, rendered exactly as at inference.

Queries get the instruction (and, for LGAI 4.2 in-context training, their demonstrations); documents are bare
except for symmetric tasks, which give both sides the instruction (NV-Embed 4). Tokenization is the embedder's own.

`train.micro_batch_size` runs each side's forward pass in length-sorted chunks inside one autograd graph: the loss
and its gradients are those of one big forward, but on a CPU the small matrices run faster and pad less
(git log, session 14).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from embedforge.data.schema import is_symmetric
from embedforge.model.batching import length_sorted_batches
from embedforge.model.embedder import Embedder
from embedforge.model.instructions import Demonstration
from embedforge.train.batching import Batch
from embedforge.train.document_table import DocumentTable
from embedforge.train.objective import Targets


@dataclass(frozen=True)
class TextInput:
    text: str
    task: str | None
    kind: str  # "query" | "document"
    demonstrations: tuple[Demonstration, ...] = ()


def batch_inputs(batch: Batch) -> tuple[list[TextInput], list[TextInput], int]:
    """Queries (B), documents (B * C: positive then negatives per example) and C."""
    queries, documents = [], []
    for item in batch.items:
        ex = item.example
        queries.append(TextInput(ex.query, ex.instruction, "query", tuple(item.demonstrations)))
        doc_task = ex.instruction if is_symmetric(ex.task_type) else None
        documents += [TextInput(t, doc_task, "document") for t in (ex.positive, *item.negatives)]
    per_example = len(documents) // max(len(queries), 1)
    return queries, documents, per_example


def batch_targets(batch: Batch) -> Targets:
    def num(value: float | None) -> float:
        return math.nan if value is None else float(value)

    return Targets(
        teacher_scores=torch.tensor([item.teacher_scores for item in batch.items], dtype=torch.float32),
        relevance=torch.tensor([num(item.example.relevance) for item in batch.items], dtype=torch.float32),
        max_relevance=torch.tensor([num(item.example.max_relevance) for item in batch.items], dtype=torch.float32),
    )


def collection_targets(batch: Batch, documents: DocumentTable) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's whole mined candidate list, whatever negatives the step trains on: the rows of its positive
    and mined negatives in the frozen document table (B, K) and their teacher scores (B, K), shorter lists padded
    with row 0 at score -inf (no teacher mass)."""
    lists = [(item.example.positive, *item.example.negatives) for item in batch.items]
    width = max(len(texts) for texts in lists)
    rows = torch.zeros(len(lists), width, dtype=torch.long, device=documents.vectors.device)
    scores = torch.full((len(lists), width), -math.inf, dtype=torch.float32, device=documents.vectors.device)
    for i, (item, texts) in enumerate(zip(batch.items, lists, strict=True)):
        ex = item.example
        rows[i, : len(texts)] = documents.indices(texts)
        given = [ex.positive_score, *(ex.negative_scores or [None] * len(ex.negatives))]
        scores[i, : len(texts)] = torch.tensor([math.nan if v is None else float(v) for v in given])
    return rows, scores


class Encoder:
    """Embeds `TextInput`s through `module` (the embedder or its DDP wrapper), counting the real tokens trained on
    (forward passes with gradients).

    With `micro_batch_size`, texts go through the module in length-sorted chunks of that many and come back in
    input order; without, in one forward pass. With `documents` (`model.frozen_documents`), documents of asymmetric
    tasks are looked up in that table of fixed vectors instead.
    """

    def __init__(
        self,
        embedder: Embedder,
        module: nn.Module | None = None,
        micro_batch_size: int | None = None,
        documents: DocumentTable | None = None,
    ) -> None:
        if micro_batch_size is not None and micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1 or None, got {micro_batch_size}")
        self.embedder = embedder
        self.module: Callable[..., torch.Tensor] = module if module is not None else embedder
        self.micro_batch_size = micro_batch_size
        self.documents = documents
        self.tokens = 0

    def __call__(self, inputs: Sequence[TextInput]) -> torch.Tensor:
        kinds = {i.kind for i in inputs}
        if len(kinds) != 1:
            raise ValueError(f"one encoder call takes one kind of text, got {sorted(kinds)}")
        kind = kinds.pop()
        if self.documents is not None and kind == "document":
            frozen = [i for i, x in enumerate(inputs) if x.task is None]
            if frozen:
                out = self.documents.lookup([inputs[i].text for i in frozen])
                if len(frozen) == len(inputs):
                    return out
                trained = [i for i, x in enumerate(inputs) if x.task is not None]
                encoded = self._encode([inputs[i] for i in trained], kind)
                result = encoded.new_empty(len(inputs), encoded.shape[1])
                result[frozen], result[trained] = out.to(encoded.dtype), encoded
                return result
        return self._encode(inputs, kind)

    def token_lengths(self, inputs: Sequence[TextInput]) -> list[int]:
        """Each input's tokens as the model sees them (instruction and special tokens included), for chunking; the
        embedder's truncation counters are left as they were."""
        embedder = self.embedder
        counters = embedder.texts_encoded, embedder.texts_truncated
        by_kind: dict[str, list[int]] = {}
        for i, x in enumerate(inputs):
            by_kind.setdefault(x.kind, []).append(i)
        lengths = [0] * len(inputs)
        for kind, idx in by_kind.items():
            batch = embedder.tokenize(
                [inputs[i].text for i in idx],
                [inputs[i].task for i in idx],
                kind,
                [list(inputs[i].demonstrations) for i in idx],
            )
            for i, n in zip(idx, batch.attention_mask.sum(dim=1).tolist(), strict=True):
                lengths[i] = int(n)
        embedder.texts_encoded, embedder.texts_truncated = counters
        return lengths

    def _encode(self, inputs: Sequence[TextInput], kind: str) -> torch.Tensor:
        if self.micro_batch_size is None or len(inputs) <= self.micro_batch_size:
            return self._forward(inputs, kind)
        groups = length_sorted_batches([i.text for i in inputs], self.micro_batch_size)
        parts = [self._forward([inputs[i] for i in group], kind) for group in groups]
        order = torch.tensor([i for group in groups for i in group], device=parts[0].device)
        return torch.cat(parts)[torch.argsort(order)]

    def _forward(self, inputs: Sequence[TextInput], kind: str) -> torch.Tensor:
        batch = self.embedder.tokenize(
            [i.text for i in inputs], [i.task for i in inputs], kind, [list(i.demonstrations) for i in inputs]
        )
        if torch.is_grad_enabled():  # GradCache encodes each chunk twice, first without gradients: count it once
            self.tokens += int(batch.attention_mask.sum())
        return self.module(batch)
