"""Evaluate section: which tasks, which models, and the report (NV-Embed 5 / Table 13; LGAI 5.1 Borda)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from embedforge.config.base import Section

Family = Literal["retrieval", "reranking", "sts", "pair_classification", "classification", "clustering"]


class CustomTask(Section):
    name: str
    family: Family
    path: str
    instruction: str | None = None


class EvaluateConfig(Section):
    enabled: bool = True
    tasks: list[str] = Field(default_factory=lambda: ["all"])
    custom_tasks: list[CustomTask] = Field(default_factory=list)
    baselines: list[str] = Field(default_factory=list, description="model references evaluated beside the trained one")
    baseline_for_deltas: str | None = None
    max_examples_per_task: PositiveInt | None = 1000
    batch_size: PositiveInt = 32
    concurrency: PositiveInt = 1
