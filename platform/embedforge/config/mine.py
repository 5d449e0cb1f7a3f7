"""Mine section: teachers, fusion, faiss index and positive-aware selection.

NV-Embed (seed 000) 4.1.1 (TopK-PercPos), LGAI-Embedding (seed 003) 4.1 (RRF, soft labels) and 4.3.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import Section

TeacherKind = Literal["embedforge", "sentence_transformers", "bm25", "cross_encoder", "llm_pointwise"]


class TeacherConfig(Section):
    kind: TeacherKind
    model: str | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    batch_size: PositiveInt = 64
    concurrency: PositiveInt = 1
    num_gpus: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _model_needed(self) -> TeacherConfig:
        if self.kind != "bm25" and not self.model:
            raise ValueError(f"teacher kind {self.kind!r} needs a 'model'")
        return self


class SelectionConfig(Section):
    """TopK-PercPos: drop candidates scoring above pos_score * margin (lowest positive when several)."""

    margin_type: Literal["perc_pos", "absolute", "none"] = "perc_pos"
    margin: float = Field(0.95, ge=0)
    min_score: float | None = None
    rank_range: tuple[int, int] | None = None
    sampling: Literal["top", "random"] = "top"
    num_negatives: PositiveInt = 7
    candidate_k: PositiveInt = 30


class MineConfig(Section):
    enabled: bool = True
    teachers: list[TeacherConfig] = Field(
        default_factory=lambda: [TeacherConfig(kind="sentence_transformers", model="bundled:all-minilm-l6-v2")]
    )
    rrf_k: PositiveInt = 60
    index: Literal["exact", "ivf", "hnsw"] = "exact"
    ivf_nlist: PositiveInt = 256
    hnsw_m: PositiveInt = 32
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    sources: list[str] = Field(default_factory=list, description="data source names to mine; empty = all")
    seed: int = 0
