"""What a config asks of a cluster at each stage's peak, to check cluster specs and warn before a run starts.

The stages run one after another, so the cluster must hold the largest stage, not their sum (NV-Embed, seed 000,
section 4.3 and appendix C: synthesis with a tensor-parallel generator, then multi-GPU contrastive training).
"""

from __future__ import annotations

from embedforge.config import EmbedforgeConfig


def stage_gpus(config: EmbedforgeConfig) -> dict[str, float]:
    """GPUs each enabled stage needs at once: synth engines, mining teachers, train workers, evaluation workers
    (per model, `evaluate.concurrency` at once), serve replicas."""
    needs: dict[str, float] = {}
    if config.synth.enabled:
        gen = config.synth.generator
        needs["synth"] = gen.num_gpus_per_engine * gen.tensor_parallel_size * gen.concurrency
    if config.mine.enabled:
        needs["mine"] = sum(t.num_gpus * t.concurrency for t in config.mine.teachers)
    if config.train.enabled:
        needs["train"] = float(config.train.num_workers) if config.train.use_gpu else 0.0
    if config.evaluate.enabled:
        needs["evaluate"] = config.evaluate.gpus_per_worker * config.evaluate.concurrency
    needs["serve"] = config.serve.num_gpus * config.serve.autoscaling.max_replicas
    return needs


def stage_cpus(config: EmbedforgeConfig) -> dict[str, float]:
    """CPUs the fixed-size parts of each stage reserve (train workers, serve replicas at their maximum)."""
    needs: dict[str, float] = {}
    if config.train.enabled:
        needs["train"] = config.train.num_workers * config.train.cpus_per_worker
    needs["serve"] = config.serve.num_cpus * config.serve.autoscaling.max_replicas
    return needs


def peak_gpus(config: EmbedforgeConfig) -> float:
    return max(stage_gpus(config).values(), default=0.0)


def shortfalls(config: EmbedforgeConfig, cluster: dict[str, float]) -> list[str]:
    """Human-readable reasons the given cluster resources (`ray.cluster_resources()`) cannot hold a stage."""
    problems = []
    have_gpus, have_cpus = cluster.get("GPU", 0.0), cluster.get("CPU", 0.0)
    for stage, gpus in stage_gpus(config).items():
        if gpus > have_gpus:
            problems.append(f"{stage} needs {gpus:g} GPUs, the cluster has {have_gpus:g} now")
    for stage, cpus in stage_cpus(config).items():
        if cpus > have_cpus:
            problems.append(f"{stage} needs {cpus:g} CPUs, the cluster has {have_cpus:g} now")
    return problems
