"""Group a source's examples for mining: one corpus (all positives + negatives, deduplicated by text) per
document instruction, and every query's positives as corpus ids (several positives per query are common:
the converters emit one example per positive, LGAI 3).

Retrieval documents are bare, so a retrieval source is one pool; symmetric tasks (STS, classification, NV-Embed
4.2) encode documents with the task instruction, so each distinct instruction gets its own pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embedforge.data.schema import TrainingExample, is_symmetric

QueryKey = tuple[str, str]  # (instruction, query text)


@dataclass
class MiningPool:
    doc_instruction: str | None
    corpus: list[str] = field(default_factory=list)
    examples: list[int] = field(default_factory=list)  # indices into the source's example list, in order
    positives: dict[QueryKey, list[int]] = field(default_factory=dict)  # query -> corpus ids of its positives
    _ids: dict[str, int] = field(default_factory=dict, repr=False)

    def doc_id(self, text: str) -> int:
        if text not in self._ids:
            self._ids[text] = len(self.corpus)
            self.corpus.append(text)
        return self._ids[text]

    def queries(self) -> list[QueryKey]:
        return list(self.positives)


def query_key(example: TrainingExample) -> QueryKey:
    return (example.instruction, example.query)


def build_pools(examples: list[TrainingExample]) -> list[MiningPool]:
    """Pools in order of first appearance; examples with an empty query or positive are refused by name."""
    pools: dict[str | None, MiningPool] = {}
    for i, ex in enumerate(examples):
        if not ex.query.strip() or not ex.positive.strip():
            raise ValueError(f"example {ex.id} ({ex.task_name}) has an empty query or positive")
        instruction = ex.instruction if is_symmetric(ex.task_type) else None
        pool = pools.setdefault(instruction, MiningPool(doc_instruction=instruction))
        pool.examples.append(i)
        positive_ids = pool.positives.setdefault(query_key(ex), [])
        pid = pool.doc_id(ex.positive)
        if pid not in positive_ids:
            positive_ids.append(pid)
        for negative in ex.negatives:
            if negative.strip():
                pool.doc_id(negative)
    return list(pools.values())
