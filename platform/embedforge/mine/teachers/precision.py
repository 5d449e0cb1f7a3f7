"""The precision a teacher computes in (`mine.teachers[].dtype`) and the one its cached vectors are named with.

A teacher only ranks candidates and scores soft labels, so half precision serves it where the hardware computes it
natively: on a GPU (`auto`), and on a CPU with AMX or AVX512-BF16 when `dtype: bfloat16` asks for it there
(benchmarks/results/mine.json: mining 1.37x sentence-transformers' float32 speed where a float32 teacher reaches
0.87x, with 98.7 % of its negatives). `auto` keeps float32 on a CPU: the vectors stay sentence-transformers' own.
"""

from __future__ import annotations

from embedforge.cluster.device import AUTO, FLOAT32, inference_dtype
from embedforge.config.mine import TeacherConfig


def teacher_dtype(teacher: TeacherConfig, device: str) -> str:
    """The dtype a sentence-transformers, cross-encoder or LLM teacher computes in on `device`: its `dtype`, where
    `auto` is `inference_dtype`'s choice (float32 on a CPU, bf16 or fp16 on a GPU)."""
    return inference_dtype(teacher.dtype, device)


def cached_precision(teacher: TeacherConfig) -> str:
    """The precision a teacher's cached vectors are named with, from its config alone (the driver may have no GPU to
    ask): its `dtype`; under `auto`, float32 for CPU actors and `half` for GPU actors (bf16 or fp16, as each GPU
    supports)."""
    if teacher.dtype != AUTO:
        return teacher.dtype
    return "half" if teacher.num_gpus > 0 else FLOAT32
