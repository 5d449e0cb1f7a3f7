"""Synth section: vLLM generator, two-step prompting, MGH negatives, cleaning and the LLM judge.

NV-Embed (seed 000) 4.3 and the appendix prompts in seed 001; MGH (seed 002) 2.1; WildBench (seed 001) 3.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import CustomResources, Section, resources_field

QueryStyle = Literal["question", "keywords", "category", "examples"]
Family = Literal["short-long", "long-short", "short-short", "long-long", "sts", "classification"]

# Guided decoding bounds strings in characters, the engine in tokens: budget at this many characters per token
# (English BPE averages about 4; 3 leaves room for JSON keys, escapes and short words).
CHARS_PER_TOKEN = 3
JSON_OVERHEAD_TOKENS = 48


class GeneratorConfig(Section):
    """One vLLM engine per Ray Data actor; `memory_fraction` is vLLM's gpu_memory_utilization (on CPU: the share
    of the NUMA node's RAM reserved for the KV cache, 0.3 is safe on a 24 GiB machine; environment.md)."""

    model: str = "bundled:smollm2-135m-instruct"
    tensor_parallel_size: PositiveInt = 1
    max_num_seqs: PositiveInt = 32
    max_model_len: PositiveInt = 2048
    memory_fraction: float = Field(0.3, gt=0, le=1, description="vLLM gpu_memory_utilization; on CPU the KV share")
    kv_cache_gb: float | None = Field(
        None, gt=0, description="explicit KV-cache size (vLLM kv_cache_memory_bytes); overrides memory_fraction"
    )
    enforce_eager: bool = Field(False, description="skip graph compilation: faster start, slower decoding")
    in_process: bool | None = Field(
        None,
        description="run the engine inside the actor's process instead of vLLM's engine-core and worker processes; "
        "None: on CPU with tensor_parallel_size 1 (git log, 2026-11-23)",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "auto",
        description="vLLM's dtype; auto: vLLM's choice, except float32 for an engine on a CPU without native bf16, "
        "where vLLM's bf16 matmul falls back to a slow path (float32 decoded 2x faster on this AVX2 machine; "
        "git log)",
    )
    concurrency: PositiveInt = 1
    num_gpus_per_engine: float = Field(0.0, ge=0)
    cpus_per_engine: float = Field(1.0, gt=0, description="Ray CPUs reserved by each engine actor")
    resources: CustomResources = resources_field("the engine actors")
    temperature: float = Field(0.8, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    repetition_penalty: float = Field(
        1.0,
        ge=1.0,
        le=2.0,
        description="divides the logits of tokens already in the prompt or output (1: off); small generators loop "
        "without it until the token budget cuts their JSON (1.1 finished 64 of 64 guided SmolLM2 outputs, 1.0 58; "
        "git log). The judge always decodes unpenalised",
    )
    max_tokens: PositiveInt = 1024
    seed: int = 0
    batch_size: PositiveInt | None = Field(
        None,
        description="prompts per engine call (one Ray Data batch); None: max_num_seqs, so that every call can fill "
        "the engine's running batch (64 prompts in flight decoded 1.5-2.0x the tokens/s of 16 here, measured in "
        "different runs; git log)",
    )
    guided: bool = Field(True, description="JSON-schema guided decoding (only the benchmark turns it off)")

    @property
    def prompts_per_call(self) -> int:
        """Prompts each engine actor gets at once: `batch_size`, else as many as the engine decodes together."""
        return self.batch_size or self.max_num_seqs

    @model_validator(mode="after")
    def _fits_context(self) -> GeneratorConfig:
        if self.max_tokens >= self.max_model_len:
            raise ValueError(
                f"generator.max_tokens ({self.max_tokens}) must be below max_model_len ({self.max_model_len}) "
                "to leave room for the prompt"
            )
        return self

    @model_validator(mode="after")
    def _in_process_needs_one_worker(self) -> GeneratorConfig:
        if self.in_process and self.tensor_parallel_size > 1:
            raise ValueError(
                f"generator.in_process: true needs tensor_parallel_size 1, got {self.tensor_parallel_size} "
                "(tensor parallelism runs one worker process per shard)"
            )
        return self


class JudgeConfig(Section):
    """WildBench 3.3: a checklist-guided score 1-10, rescaled S' = (S - 5) * 2; kept when S' > threshold."""

    enabled: bool = True
    model: str | None = None  # None: the generator's engine judges (one engine, no extra memory)
    threshold: float = Field(0.0, ge=-10, le=10, description="kept when (S - 5) * 2 exceeds this")
    max_tokens: PositiveInt = 160
    note_chars: PositiveInt = Field(150, description="bound on the judge's strengths / weaknesses strings")

    @model_validator(mode="after")
    def _fits_budget(self) -> JudgeConfig:
        need = 2 * self.note_chars // CHARS_PER_TOKEN + 16
        if self.enabled and self.max_tokens < need:
            raise ValueError(
                f"judge.max_tokens ({self.max_tokens}) is below the {need} tokens two notes of "
                f"judge.note_chars={self.note_chars} characters and a score need; raise it or lower note_chars"
            )
        return self


class SynthConfig(Section):
    implicit_values: ClassVar[dict[str, Any]] = {"example_queries": None, "max_example_queries": 8}

    enabled: bool = True
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    families: list[Family] = Field(
        default_factory=lambda: ["short-long", "long-short", "short-short", "long-long", "sts", "classification"]
    )
    tasks_per_family: PositiveInt = 4
    tasks_per_brainstorm: PositiveInt = Field(20, description="tasks asked of one brainstorm prompt (MGH A.1: ~20)")
    max_task_chars: PositiveInt = 160
    examples_per_task: PositiveInt = 2
    documents: str | None = None  # corpus-grounded mode: path to the user's documents
    documents_instruction: str = "Given a question, retrieve passages that answer the question"
    grounded_mode: Literal["queries", "examples"] = Field(
        "queries",
        description="corpus-grounded generation: `queries` writes one query per document and style by few-shot "
        "completion (InPars / GPL query generation; negatives are mined from the whole collection), `examples` "
        "asks for a JSON example with a query and four graded negatives (MGH 2.1)",
    )
    query_styles: list[QueryStyle] = Field(
        default_factory=lambda: ["question", "keywords"],
        min_length=1,
        description="queries mode: one query per document and style; `examples` writes them like `example_queries`",
    )
    example_queries: str | None = Field(
        None,
        description="queries mode, style `examples`: a few of the collection's real queries (a BEIR queries .jsonl, "
        "or one per line), no judgments needed; each, beside the passage BM25 ranks first for it, demonstrates the "
        "collection's own query form to the generator (Promptagator 3.1)",
    )
    max_example_queries: PositiveInt = Field(8, description="a seeded sample of this many example queries is shown")
    max_query_tokens: PositiveInt = Field(32, description="queries mode: the generator's budget for one query")
    max_copied_words: int | None = Field(
        None,
        ge=2,
        description="queries mode: a query that repeats this many of its passage's words in a row is a copy, not a "
        "query, and is dropped (`query_copied_run`); None keeps them",
    )
    max_documents: PositiveInt | None = Field(
        None, description="a seeded sample of this many documents is prompted (all of them are mined and indexed)"
    )
    max_document_prompt_chars: PositiveInt = Field(1500, description="user documents are cut to this in prompts")
    heldout_fraction: float = Field(0.1, ge=0, lt=1)
    shard_size: PositiveInt = Field(64, description="prompts per output shard (the unit of resume)")
    dedup_model: str = "bundled:all-minilm-l6-v2"
    near_duplicate_threshold: float = Field(0.95, gt=0, le=1)
    min_chars: PositiveInt = 3
    max_query_chars: PositiveInt = 200
    max_document_chars: PositiveInt = 400
    num_negatives: Literal[4] = Field(4, description="MGH 2.1: four negatives, levels 1 (hardest) .. 4 (easiest)")
    judge: JudgeConfig = Field(default_factory=JudgeConfig)

    @property
    def writes_queries(self) -> bool:
        """Corpus-grounded few-shot query writing (no JSON, no generated negatives)."""
        return self.documents is not None and self.grounded_mode == "queries"

    @model_validator(mode="after")
    def _examples_style_has_queries(self) -> SynthConfig:
        styled = "examples" in self.query_styles
        if styled and not self.example_queries:
            raise ValueError("synth.query_styles: the style 'examples' needs synth.example_queries, a file of queries")
        if self.example_queries and not styled:
            raise ValueError("synth.example_queries is shown only to the style 'examples': add it to query_styles")
        return self

    @model_validator(mode="after")
    def _fits_token_budget(self) -> SynthConfig:
        if self.min_chars >= min(self.max_query_chars, self.max_document_chars):
            raise ValueError(f"synth.min_chars ({self.min_chars}) must be below max_query_chars and max_document_chars")
        if self.writes_queries:
            return self
        chars = self.max_query_chars + (1 + self.num_negatives) * self.max_document_chars
        need = chars // CHARS_PER_TOKEN + JSON_OVERHEAD_TOKENS
        if self.generator.max_tokens < need:
            raise ValueError(
                f"synth.generator.max_tokens ({self.generator.max_tokens}) cannot hold a full example: a query of "
                f"{self.max_query_chars} chars and {1 + self.num_negatives} documents of {self.max_document_chars} "
                f"chars need about {need} tokens; raise max_tokens or lower max_query_chars / max_document_chars"
            )
        return self
