"""No score on training data: which of a task's scored units the run trained on.

A unit is what a task scores: a retrieval or reranking query, an STS or pair-classification pair, a classification
test text, a clustering text. It is contaminated when the run's training examples hold it: the query text for
queries and single texts, both texts of a pair together for pairs (training on the same sentences in other pairs
is not scoring on training data). Texts are compared by an exact hash after normalising case and whitespace.

Overlap is real even between datasets: STS-B's MSRpar pairs are MRPC pairs, so a run that trains on STS-B `train`
has trained on part of MRPC `test`. Evaluation drops such units before scoring (`evaluate.contamination: drop`,
the default, counted in the manifest and the report) or keeps them and labels the task contaminated (`mark`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from embedforge.config import EmbedforgeConfig
from embedforge.data.schema import TrainingExample
from embedforge.evaluate.tasks import (
    ClassificationTask,
    ClusteringTask,
    PairClassificationTask,
    RerankingTask,
    RetrievalTask,
    STSTask,
    Task,
)


def text_key(text: str) -> bytes:
    """An 8-byte hash of `text` with case folded and whitespace runs collapsed."""
    return hashlib.blake2b(" ".join(text.casefold().split()).encode(), digest_size=8).digest()


def pair_key(a: str, b: str) -> bytes:
    """Order-free key of a text pair."""
    return b"".join(sorted((text_key(a), text_key(b))))


@dataclass
class TrainingTexts:
    """Hashes of every text the run trained on, and of every pair of texts trained together."""

    texts: set[bytes] = field(default_factory=set)
    pairs: set[bytes] = field(default_factory=set)

    @classmethod
    def of(cls, examples: Iterable[TrainingExample]) -> TrainingTexts:
        seen = cls()
        for ex in examples:
            group = [ex.query, ex.positive, *ex.negatives]
            seen.texts.update(text_key(t) for t in group)
            seen.pairs.update(pair_key(ex.query, t) for t in group[1:])
        return seen

    def _seen(self, task: Task) -> list[bool]:
        """Per scored unit of `task`, in the task's order: whether the run trained on it."""
        if isinstance(task, RetrievalTask):
            return [text_key(q.text) in self.texts for q in task.queries]
        if isinstance(task, RerankingTask):
            return [text_key(g.query) in self.texts for g in task.groups]
        if isinstance(task, STSTask | PairClassificationTask):
            return [pair_key(p.text1, p.text2) in self.pairs for p in task.pairs]
        if isinstance(task, ClassificationTask):
            return [text_key(t.text) in self.texts for t in task.test]
        if isinstance(task, ClusteringTask):
            return [text_key(t.text) in self.texts for t in task.texts]
        raise TypeError(f"no contamination rule for task type {type(task).__name__}")

    def contaminated_units(self, task: Task) -> int:
        """How many of `task`'s scored units the run trained on."""
        return sum(self._seen(task))

    def decontaminated(self, task: Task) -> Task:
        """`task` without the scored units the run trained on (the rest of the task as it was)."""
        keep = [not seen for seen in self._seen(task)]
        if all(keep):
            return task
        if not any(keep):
            raise ValueError(f"evaluate: every scored unit of task {task.name!r} is in the run's training data")

        def kept(items: list) -> list:
            return [item for item, k in zip(items, keep, strict=True) if k]

        if isinstance(task, RetrievalTask):
            return replace(task, queries=kept(task.queries))
        if isinstance(task, RerankingTask):
            return replace(task, groups=kept(task.groups))
        if isinstance(task, STSTask | PairClassificationTask):
            return replace(task, pairs=kept(task.pairs))
        if isinstance(task, ClassificationTask):
            return replace(task, test=kept(task.test))
        return replace(task, texts=kept(task.texts))  # type: ignore[call-arg]


def run_training_texts(config: EmbedforgeConfig, run_dir: Path) -> TrainingTexts:
    """The texts of every example the run's training stages read (mined or straight from the sources)."""
    from embedforge.train.examples import load_training_examples

    examples = load_training_examples(config, run_dir).examples
    return TrainingTexts.of(ex for rows in examples.values() for ex in rows)
