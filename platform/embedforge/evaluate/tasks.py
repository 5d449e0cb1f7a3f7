"""Evaluation tasks: one record type per MTEB family (NV-Embed 5; MTEB section 3.2), built from local files.

Every task has a name, its family, the instruction its queries get (NV-Embed Table 13) and its data as the
shared record types of `embedforge.data.schema`. `limit(n, seed)` keeps a seeded sample of at most n evaluation
units (queries, groups, pairs or texts) so that a quick run stays small and two models see the same sample.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import ClassVar

from embedforge.data.schema import CorpusDocument, LabelledText, Query, RerankingGroup, ScoredPair

FAMILIES: tuple[str, ...] = ("retrieval", "reranking", "sts", "pair_classification", "classification", "clustering")


def _sample(items: list, n: int | None, seed: int) -> list:
    if n is None or len(items) <= n:
        return list(items)
    keep = sorted(random.Random(seed).sample(range(len(items)), n))
    return [items[i] for i in keep]


@dataclass
class Task(ABC):
    name: str
    instruction: str
    # in-context (query, positive) demonstrations before every query's instruction (LGAI 4.2; evaluate.demonstrations)
    demonstrations: list[tuple[str, str]] = field(default_factory=list)
    family: ClassVar[str]
    main_metric: ClassVar[str]

    @abstractmethod
    def size(self) -> int:
        """Number of evaluation units (queries, groups, pairs or texts)."""

    @abstractmethod
    def limit(self, n: int | None, seed: int = 0) -> Task:
        """A copy with a seeded sample of at most n evaluation units (None: all)."""


@dataclass
class RetrievalTask(Task):
    """Queries searched against a corpus, graded judgements in `qrels[query_id][doc_id]` (main score nDCG@10).

    Limiting keeps a sample of the queries and the whole corpus, so the search stays as hard as designed."""

    corpus: list[CorpusDocument] = field(default_factory=list)
    queries: list[Query] = field(default_factory=list)
    qrels: dict[str, dict[str, float]] = field(default_factory=dict)
    family: ClassVar[str] = "retrieval"
    main_metric: ClassVar[str] = "ndcg_at_10"

    def __post_init__(self) -> None:
        judged = [q for q in self.queries if any(r > 0 for r in self.qrels.get(q.query_id, {}).values())]
        if not judged:
            raise ValueError(f"task {self.name}: no query has a relevant document in its qrels")
        self.queries = judged

    def size(self) -> int:
        return len(self.queries)

    def limit(self, n: int | None, seed: int = 0) -> RetrievalTask:
        return replace(self, queries=_sample(self.queries, n, seed))

    def limit_corpus(self, n: int | None, seed: int = 0) -> RetrievalTask:
        """Keep every document judged for the kept queries plus a seeded sample of the others, n in all
        (fewer distractors make the task easier: scores are comparable only at the same n)."""
        judged = {d for q in self.queries for d in self.qrels.get(q.query_id, {})}
        keep = [d for d in self.corpus if d.doc_id in judged]
        others = [d for d in self.corpus if d.doc_id not in judged]
        if n is None or len(self.corpus) <= n:
            return self
        chosen = {id(d) for d in keep + _sample(others, max(0, n - len(keep)), seed)}
        return replace(self, corpus=[d for d in self.corpus if id(d) in chosen])


@dataclass
class RerankingTask(Task):
    """Each query's own candidates, relevant and not, ranked by similarity (main score MAP)."""

    groups: list[RerankingGroup] = field(default_factory=list)
    family: ClassVar[str] = "reranking"
    main_metric: ClassVar[str] = "map"

    def __post_init__(self) -> None:
        self.groups = [g for g in self.groups if g.positives and g.negatives]
        if not self.groups:
            raise ValueError(f"task {self.name}: no query has both relevant and irrelevant candidates")

    def size(self) -> int:
        return len(self.groups)

    def limit(self, n: int | None, seed: int = 0) -> RerankingTask:
        return replace(self, groups=_sample(self.groups, n, seed))


@dataclass
class STSTask(Task):
    """Sentence pairs with a graded similarity (main score Spearman of cosine)."""

    pairs: list[ScoredPair] = field(default_factory=list)
    family: ClassVar[str] = "sts"
    main_metric: ClassVar[str] = "cosine_spearman"

    def size(self) -> int:
        return len(self.pairs)

    def limit(self, n: int | None, seed: int = 0) -> STSTask:
        return replace(self, pairs=_sample(self.pairs, n, seed))


@dataclass
class PairClassificationTask(Task):
    """Sentence pairs labelled 1 (paraphrase / duplicate) or 0 (main score AP of cosine)."""

    pairs: list[ScoredPair] = field(default_factory=list)
    family: ClassVar[str] = "pair_classification"
    main_metric: ClassVar[str] = "cosine_ap"

    def __post_init__(self) -> None:
        bad = sorted({p.score for p in self.pairs} - {0.0, 1.0})
        if bad:
            raise ValueError(f"task {self.name}: pair labels must be 0 or 1, found {bad[:5]}")

    def size(self) -> int:
        return len(self.pairs)

    def limit(self, n: int | None, seed: int = 0) -> PairClassificationTask:
        return replace(self, pairs=_sample(self.pairs, n, seed))


@dataclass
class ClassificationTask(Task):
    """Labelled texts with a train and a test split (main score logistic-regression accuracy, MTEB section 3.2).

    MTEB's protocol: each of `experiments` runs fits its classifier on a label-balanced draw of the train split,
    `samples_per_label` texts per label (MTEB's default 8; some tasks set 16 or 32), and the accuracies on the test
    split are averaged. `limit` bounds the test split, the scored units; the draws bound what the train split
    costs."""

    train: list[LabelledText] = field(default_factory=list)
    test: list[LabelledText] = field(default_factory=list)
    samples_per_label: int = 8
    experiments: int = 10
    family: ClassVar[str] = "classification"
    main_metric: ClassVar[str] = "accuracy"

    def __post_init__(self) -> None:
        if self.samples_per_label < 1 or self.experiments < 1:
            raise ValueError(
                f"task {self.name}: samples_per_label and experiments must be >= 1, "
                f"got {self.samples_per_label} and {self.experiments}"
            )

    def size(self) -> int:
        return len(self.test)

    def limit(self, n: int | None, seed: int = 0) -> ClassificationTask:
        return replace(self, test=_sample(self.test, n, seed + 1))

    def training_draws(self, seed: int = 0) -> list[list[int]]:
        """Per experiment, the indices into `train` of its label-balanced draw: at most `samples_per_label` of
        each label, taken in the order of a permutation seeded by (seed, experiment)."""
        labels = sorted({x.label for x in self.train})
        if len(labels) < 2:
            raise ValueError(f"task {self.name}: the train split needs at least 2 labels, found {labels}")
        draws = []
        for experiment in range(self.experiments):
            order = list(range(len(self.train)))
            random.Random(f"{seed}/{experiment}").shuffle(order)
            taken: Counter[str] = Counter()
            draw = []
            for i in order:
                if taken[self.train[i].label] < self.samples_per_label:
                    taken[self.train[i].label] += 1
                    draw.append(i)
            draws.append(sorted(draw))
        return draws


@dataclass
class ClusteringTask(Task):
    """Texts whose gold labels define the clusters (main score V-measure of k-means)."""

    texts: list[LabelledText] = field(default_factory=list)
    family: ClassVar[str] = "clustering"
    main_metric: ClassVar[str] = "v_measure"

    def size(self) -> int:
        return len(self.texts)

    def limit(self, n: int | None, seed: int = 0) -> ClusteringTask:
        return replace(self, texts=_sample(self.texts, n, seed))


def split_train_test(items: list[LabelledText], test_fraction: float, seed: int) -> tuple[list, list]:
    """A seeded random train/test split for a labelled set that ships as one file."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    cut = max(1, round(len(items) * test_fraction))
    test = sorted(order[:cut])
    train = sorted(order[cut:])
    return [items[i] for i in train], [items[i] for i in test]
