"""Synth section: vLLM generator, two-step prompting, MGH negatives, cleaning and the LLM judge.

NV-Embed (seed 000) 4.3 and the appendix prompts in seed 001; MGH (seed 002) 2.1; WildBench (seed 001) 3.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from embedforge.config.base import Section

Family = Literal["short-long", "long-short", "short-short", "long-long", "sts", "classification"]


class GeneratorConfig(Section):
    model: str = "bundled:smollm2-135m-instruct"
    tensor_parallel_size: PositiveInt = 1
    max_num_seqs: PositiveInt = 32
    max_model_len: PositiveInt = 2048
    memory_fraction: float = Field(0.3, gt=0, le=1, description="vLLM gpu_memory_utilization; on CPU the KV share")
    concurrency: PositiveInt = 1
    num_gpus_per_engine: float = Field(0.0, ge=0)
    temperature: float = Field(0.8, gt=0)
    top_p: float = Field(0.95, gt=0, le=1)
    max_tokens: PositiveInt = 384
    seed: int = 0
    batch_size: PositiveInt = 16


class JudgeConfig(Section):
    enabled: bool = True
    model: str | None = None  # None: the generator's model
    threshold: float = Field(0.0, ge=-10, le=10, description="kept when (S - 5) * 2 exceeds this")
    max_tokens: PositiveInt = 64


class SynthConfig(Section):
    enabled: bool = True
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    families: list[Family] = Field(
        default_factory=lambda: ["short-long", "long-short", "short-short", "long-long", "sts", "classification"]
    )
    tasks_per_family: PositiveInt = 4
    examples_per_task: PositiveInt = 2
    documents: str | None = None  # corpus-grounded mode: path to the user's documents
    max_documents: PositiveInt | None = None
    heldout_fraction: float = Field(0.1, ge=0, lt=1)
    near_duplicate_threshold: float = Field(0.95, gt=0, le=1)
    min_chars: PositiveInt = 3
    max_chars: PositiveInt = 2000
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
