"""A vLLM engine and the calls that run prompts through it: chat with JSON-schema guided decoding, raw completion.

NV-Embed (seed 000) 4.3 serves its generator (Mixtral-8x22B-Instruct) with vLLM; here the engine is built inside
a Ray actor (vLLM starts its workers with spawn, environment.md), on CUDA or on the CPU backend, where
`gpu_memory_utilization` is the share of RAM reserved for the KV cache.
"""

from __future__ import annotations

import json
import logging
import os
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any

from embedforge.cluster.device import native_bf16_cpu
from embedforge.config.synth import GeneratorConfig
from embedforge.models.bundled import resolve_model

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineSettings:
    """What an engine and its sampling need; built from config `synth.generator` (a plain, picklable record)."""

    model: str
    tensor_parallel_size: int = 1
    max_num_seqs: int = 32
    max_model_len: int = 2048
    memory_fraction: float = 0.3
    kv_cache_gb: float | None = None
    enforce_eager: bool = False
    in_process: bool | None = None
    dtype: str = "auto"
    temperature: float = 0.8
    top_p: float = 0.95
    repetition_penalty: float = 1.0
    seed: int = 0
    guided: bool = True

    @classmethod
    def from_config(cls, gen: GeneratorConfig, **overrides: Any) -> EngineSettings:
        """The settings of config `synth.generator`, with `overrides` (e.g. a benchmark's max_num_seqs)."""
        values = {f.name: getattr(gen, f.name) for f in fields(cls)}
        return cls(**{**values, **overrides})


@dataclass(frozen=True)
class Generation:
    text: str
    prompt_tokens: int
    output_tokens: int
    finish_reason: str


def runs_in_process(settings: EngineSettings) -> bool:
    """Whether the engine runs inside the calling process: as configured, else on CPU with one worker.

    vLLM's default splits an engine into a front end, an engine-core process and a worker process that pass every
    decoding step through shared memory; on 2 cores the three processes spin-wait against each other, one core is
    reserved for the engine core, and starting them took 22-42 s. In one process the engine started in 5-15 s and
    decoded 1.5-1.8x faster (benchmarks/synth_engine.py, git log). GPUs and tensor parallelism keep vLLM's
    default.
    """
    import torch

    if settings.in_process is not None:
        return settings.in_process
    return settings.tensor_parallel_size == 1 and not torch.cuda.is_available()


def runs_float32(settings: EngineSettings, on_gpu: bool, native_bf16: bool) -> bool:
    """Whether the engine loads float32 weights: a CPU engine whose dtype is `auto` or `float32`, on a CPU without
    native bf16 such as this machine's AVX2 cores.

    There vLLM cannot build its oneDNN bf16 matmul and falls back to torch's bf16 `linear`, which took 74 % of each
    decoding step (git log, 2026-11-23: bf16 38.3 tokens/s against 62.3 in float32 on 16 prompts). In
    float32 vLLM's own oneDNN matmul runs every linear layer; with vLLM 0.32 it decoded 1.13-1.35x faster than
    torch's float32 `linear` (git log, 2026-11-24).
    """
    if on_gpu or native_bf16:
        return False
    return settings.dtype in ("auto", "float32")


def engine_dtype(settings: EngineSettings) -> str:
    """The dtype `build_engine` gives vLLM for these settings on this machine (`runs_float32`)."""
    import torch

    return "float32" if runs_float32(settings, torch.cuda.is_available(), native_bf16_cpu()) else settings.dtype


def build_engine(settings: EngineSettings) -> Any:
    """A `vllm.LLM` for the settings' model (a `bundled:` name or a checkpoint folder)."""
    import torch
    from vllm import LLM

    from embedforge.synth.penalties import install_cpu_penalties
    from embedforge.synth.top_p import install_cpu_top_p

    in_process = runs_in_process(settings)
    dtype = engine_dtype(settings)
    on_gpu = torch.cuda.is_available()
    if in_process and not on_gpu:
        install_cpu_top_p()  # vLLM samples in this process only when the engine runs here
        install_cpu_penalties()
    started = time.time()
    with _multiprocessing_env(in_process):
        llm = LLM(
            model=str(resolve_model(settings.model)),
            dtype=dtype,
            tensor_parallel_size=settings.tensor_parallel_size,
            max_num_seqs=settings.max_num_seqs,
            max_model_len=settings.max_model_len,
            gpu_memory_utilization=settings.memory_fraction,
            kv_cache_memory_bytes=int(settings.kv_cache_gb * 1024**3) if settings.kv_cache_gb else None,
            enforce_eager=settings.enforce_eager,
            # compact guided JSON: with free whitespace, small models pad between tokens until max_tokens
            structured_outputs_config={"backend": "xgrammar", "disable_any_whitespace": True},
            seed=settings.seed,
            distributed_executor_backend="uni" if in_process else None,
            **_whole_prefills(on_gpu),
        )
    log.info(
        "vLLM engine for %s ready in %.1fs (%s, %s)",
        settings.model,
        time.time() - started,
        "in-process" if in_process else "multiprocess",
        dtype,
    )
    return llm


def _whole_prefills(on_gpu: bool) -> dict[str, Any]:
    """Scheduler settings that never split a prompt's prefill over steps, on CPU.

    vLLM 0.32 rewinds a seeded request's random generator after each step that ends inside its prefill, and a CPU
    generator cannot rewind ("CPU Generator does not use offset"); every prompt here is seeded (`row_seed`). With
    more prompt tokens in flight than one step's budget (4,096 on CPU; 64 step-2 prompts were more), a CPU engine
    failed in its first steps. Without chunked prefill a prompt waits for a step with room for all of it, and vLLM
    raises the budget to at least `max_model_len`. GPUs keep chunked prefill.
    """
    return {} if on_gpu else {"enable_chunked_prefill": False}


@contextmanager
def _multiprocessing_env(in_process: bool) -> Iterator[None]:
    """vLLM reads VLLM_ENABLE_V1_MULTIPROCESSING while it builds an engine: turn it off for an in-process engine
    only, and put the variable back, so a later engine in the same process gets its own layout."""
    name = "VLLM_ENABLE_V1_MULTIPROCESSING"
    previous = os.environ.get(name)
    if in_process:
        os.environ[name] = "0"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


def row_seed(base: int, key: str) -> int:
    """A per-prompt sampling seed derived from a stable key, so a resumed shard samples the same way."""
    return (base + zlib.crc32(key.encode("utf-8"))) % (2**31)


def generate(
    llm: Any,
    settings: EngineSettings,
    prompts: list[str],
    schemas: list[dict[str, Any] | None],
    max_tokens: list[int],
    keys: list[str],
) -> list[Generation]:
    """Chat-complete each prompt (one user turn); a schema turns on guided JSON decoding for that prompt."""
    from vllm.sampling_params import StructuredOutputsParams

    params = [
        _sampling(
            settings,
            budget,
            key,
            structured_outputs=StructuredOutputsParams(json=json.dumps(schema))
            if schema is not None and settings.guided
            else None,
        )
        for schema, budget, key in zip(schemas, max_tokens, keys, strict=True)
    ]
    messages = [[{"role": "user", "content": p}] for p in prompts]
    return _timed(lambda: llm.chat(messages, params, use_tqdm=False), len(prompts))


def complete(
    llm: Any, settings: EngineSettings, prompts: list[str], max_tokens: list[int], keys: list[str], stop: str
) -> list[Generation]:
    """Continue each raw prompt (no chat template) until `stop` or the token budget: few-shot patterns."""
    params = [_sampling(settings, budget, key, stop=[stop]) for budget, key in zip(max_tokens, keys, strict=True)]
    return _timed(lambda: llm.generate(prompts, params, use_tqdm=False), len(prompts))


def _sampling(settings: EngineSettings, budget: int, key: str, **extra: Any) -> Any:
    from vllm import SamplingParams

    return SamplingParams(
        temperature=settings.temperature,
        top_p=settings.top_p,
        repetition_penalty=settings.repetition_penalty,
        max_tokens=int(budget),
        seed=row_seed(settings.seed, key),
        **extra,
    )


def _timed(call: Callable[[], list[Any]], count: int) -> list[Generation]:
    if not count:
        return []
    started = time.time()
    outputs = call()
    elapsed = max(time.time() - started, 1e-9)
    result = [
        Generation(
            text=o.outputs[0].text,
            prompt_tokens=len(o.prompt_token_ids or []),
            output_tokens=len(o.outputs[0].token_ids),
            finish_reason=str(o.outputs[0].finish_reason),
        )
        for o in outputs
    ]
    tokens = sum(g.output_tokens for g in result)
    log.info(
        "generated %d prompts in %.1fs: %.2f prompts/s, %.1f tokens/s",
        len(result),
        elapsed,
        len(result) / elapsed,
        tokens / elapsed,
    )
    return result
