"""Data section: named training / development sources, each converted into the training-example schema."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import Section

SourceKind = Literal["shared", "parquet", "jsonl", "beir", "title_body", "cropped", "documents", "run"]
TaskType = Literal["retrieval", "sts", "classification", "clustering", "pair", "reranking", "nli"]


class DataSource(Section):
    """One dataset. `kind: shared` names a folder of ../shared/data (see its MANIFEST.md) in `path`;
    `parquet` / `jsonl` are files or folders already in the training-example schema; `beir` is a BEIR folder;
    `documents` is a user's own document collection (JSONL, Parquet or a folder of text files) for synthesis;
    `title_body` is such a collection trained on as (title, text) retrieval pairs (NV-Embed 4.2);
    `cropped` is such a collection as queries cut from its documents, no generator (Contriever 3.1, `crop_words`);
    without a `path` it cuts them from `mine.corpus`, the collection the teachers rank;
    `run` reads the output of an earlier stage in the run directory (`path` is the stage name).
    `task_type` and `instruction` default to the shared dataset's family and instruction where there is one."""

    implicit_values: ClassVar[dict[str, Any]] = {"crop_words": (4, 12)}

    name: str = Field(min_length=1)
    kind: SourceKind
    path: str = ""
    task_type: TaskType | None = None
    instruction: str | None = None
    weight: float = Field(1.0, gt=0)
    max_examples: PositiveInt | None = None
    split: str | None = None
    negatives_per_example: int = Field(
        4, ge=0, description="classification / clustering sources: negatives drawn from other classes per example"
    )
    crop_words: tuple[PositiveInt, PositiveInt] = Field(
        (4, 12), description="kind cropped: the (shortest, longest) span of a document's words a query is cut as"
    )

    @model_validator(mode="after")
    def _path_given(self) -> DataSource:
        if not self.path and self.kind != "cropped":
            raise ValueError(f"path: a source of kind {self.kind!r} needs one")
        return self

    @model_validator(mode="after")
    def _crop_words_ordered(self) -> DataSource:
        low, high = self.crop_words
        if low > high:
            raise ValueError(f"crop_words: the shortest span ({low}) is longer than the longest ({high})")
        return self

    @model_validator(mode="after")
    def _shared_dataset_exists(self) -> DataSource:
        if self.kind != "shared":
            return self
        from embedforge.data.shared import SHARED_DATASETS

        dataset = SHARED_DATASETS.get(self.path)
        if dataset is None:
            raise ValueError(f"path: unknown shared dataset {self.path!r} (known: {sorted(SHARED_DATASETS)})")
        if self.split is not None and self.split not in dataset.splits:
            raise ValueError(
                f"split: shared dataset {self.path!r} has no split {self.split!r} (splits: {list(dataset.splits)})"
            )
        return self


class DataConfig(Section):
    sources: list[DataSource] = Field(default_factory=list)
    seed: int = 0
