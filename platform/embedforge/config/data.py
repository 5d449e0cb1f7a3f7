"""Data section: named training / development sources, each converted into the training-example schema."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from embedforge.config.base import Section

SourceKind = Literal["shared", "parquet", "jsonl", "beir", "documents", "run"]
TaskType = Literal["retrieval", "sts", "classification", "clustering", "pair", "reranking", "nli"]


class DataSource(Section):
    """One dataset. `kind: shared` names a folder of ../shared/data (see its MANIFEST.md) in `path`;
    `parquet` / `jsonl` are files or folders already in the training-example schema; `beir` is a BEIR folder;
    `documents` is a user's own document collection (JSONL, Parquet or a folder of text files);
    `run` reads the output of an earlier stage in the run directory (`path` is the stage name)."""

    name: str = Field(min_length=1)
    kind: SourceKind
    path: str
    task_type: TaskType | None = None
    instruction: str | None = None
    weight: float = Field(1.0, gt=0)
    max_examples: PositiveInt | None = None
    split: str | None = None


class DataConfig(Section):
    sources: list[DataSource] = Field(default_factory=list)
    seed: int = 0
