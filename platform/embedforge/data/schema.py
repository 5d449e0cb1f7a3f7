"""The one data format every stage shares: a training example, a corpus document, and evaluation records.

Each record is defined once as a Python dataclass and once as an Arrow schema built from the same field list,
so Parquet written by any stage is readable by Ray Data and by every other stage with named fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import pyarrow as pa

TaskType = Literal["retrieval", "sts", "classification", "clustering", "pair", "reranking", "nli"]
TASK_TYPES: tuple[str, ...] = ("retrieval", "sts", "classification", "clustering", "pair", "reranking", "nli")

# Non-retrieval sets carry their task instruction on both sides (NV-Embed 4, recipe section 4).
SYMMETRIC_TASK_TYPES = frozenset({"sts", "classification", "clustering", "pair", "nli"})


def is_symmetric(task_type: str) -> bool:
    """True when documents get the task instruction too (STS, classification, clustering, pairs)."""
    return task_type in SYMMETRIC_TASK_TYPES


@dataclass
class TrainingExample:
    """A query, one positive and k hard negatives, with MGH levels (1 hardest .. 4 easiest) and soft labels."""

    id: str
    task_name: str
    task_type: str
    instruction: str
    query: str
    positive: str
    negatives: list[str] = field(default_factory=list)
    negative_levels: list[int] = field(default_factory=list)
    positive_score: float | None = None
    negative_scores: list[float] = field(default_factory=list)
    relevance: float | None = None  # graded relevance r of the positive (paper 004 sec. 6); None = binary
    max_relevance: float | None = None  # R, the top grade of the source
    provenance: str = "{}"  # JSON object: source, generator, template, judge score, mining parameters ...

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"task_type {self.task_type!r} is not one of {TASK_TYPES}")
        if self.negative_levels and len(self.negative_levels) != len(self.negatives):
            raise ValueError(
                f"example {self.id}: {len(self.negative_levels)} negative_levels for {len(self.negatives)} negatives"
            )
        if self.negative_scores and len(self.negative_scores) != len(self.negatives):
            raise ValueError(
                f"example {self.id}: {len(self.negative_scores)} negative_scores for {len(self.negatives)} negatives"
            )

    def provenance_dict(self) -> dict[str, Any]:
        return json.loads(self.provenance)

    def to_row(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> TrainingExample:
        names = {f.name for f in fields(cls)}
        values = {k: _plain(v) for k, v in row.items() if k in names}
        return cls(**values)


@dataclass
class CorpusDocument:
    doc_id: str
    text: str
    title: str = ""

    @property
    def embedded_text(self) -> str:
        """The document as embedded everywhere (synth, mining, evaluation): `title text` (BEIR / MTEB)."""
        return f"{self.title} {self.text}".strip() if self.title else self.text


@dataclass
class Query:
    query_id: str
    text: str


@dataclass
class Qrel:
    query_id: str
    doc_id: str
    relevance: float


@dataclass
class ScoredPair:
    """STS or pair-classification record: a score (0-5 similarity) or a binary label."""

    text1: str
    text2: str
    score: float


@dataclass
class LabelledText:
    text: str
    label: str


@dataclass
class NliPair:
    """A premise / hypothesis pair with its NLI label: entailment, neutral or contradiction."""

    premise: str
    hypothesis: str
    label: str


@dataclass
class RerankingGroup:
    """One query with its judged candidates split into relevant (positives) and not relevant (negatives)."""

    query_id: str
    query: str
    positives: list[str] = field(default_factory=list)
    negatives: list[str] = field(default_factory=list)


def _plain(value: Any) -> Any:
    """Arrow / numpy containers -> Python lists, so dataclasses hold plain values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


TRAINING_EXAMPLE_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("task_name", pa.string(), nullable=False),
        pa.field("task_type", pa.string(), nullable=False),
        pa.field("instruction", pa.string(), nullable=False),
        pa.field("query", pa.string(), nullable=False),
        pa.field("positive", pa.string(), nullable=False),
        pa.field("negatives", pa.list_(pa.string()), nullable=False),
        pa.field("negative_levels", pa.list_(pa.int8()), nullable=False),
        pa.field("positive_score", pa.float32()),
        pa.field("negative_scores", pa.list_(pa.float32()), nullable=False),
        pa.field("relevance", pa.float32()),
        pa.field("max_relevance", pa.float32()),
        pa.field("provenance", pa.string(), nullable=False),
    ]
)

CORPUS_SCHEMA = pa.schema([("doc_id", pa.string()), ("text", pa.string()), ("title", pa.string())])
QUERY_SCHEMA = pa.schema([("query_id", pa.string()), ("text", pa.string())])
QREL_SCHEMA = pa.schema([("query_id", pa.string()), ("doc_id", pa.string()), ("relevance", pa.float32())])
SCORED_PAIR_SCHEMA = pa.schema([("text1", pa.string()), ("text2", pa.string()), ("score", pa.float32())])
LABELLED_TEXT_SCHEMA = pa.schema([("text", pa.string()), ("label", pa.string())])
NLI_PAIR_SCHEMA = pa.schema([("premise", pa.string()), ("hypothesis", pa.string()), ("label", pa.string())])
RERANKING_GROUP_SCHEMA = pa.schema(
    [
        ("query_id", pa.string()),
        ("query", pa.string()),
        ("positives", pa.list_(pa.string())),
        ("negatives", pa.list_(pa.string())),
    ]
)

SCHEMAS: dict[type, pa.Schema] = {
    TrainingExample: TRAINING_EXAMPLE_SCHEMA,
    CorpusDocument: CORPUS_SCHEMA,
    Query: QUERY_SCHEMA,
    Qrel: QREL_SCHEMA,
    ScoredPair: SCORED_PAIR_SCHEMA,
    LabelledText: LABELLED_TEXT_SCHEMA,
    NliPair: NLI_PAIR_SCHEMA,
    RerankingGroup: RERANKING_GROUP_SCHEMA,
}

assert [f.name for f in fields(TrainingExample)] == TRAINING_EXAMPLE_SCHEMA.names, "schema and dataclass drifted"
