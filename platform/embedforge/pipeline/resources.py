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
    """CPUs the fixed-size parts of each stage reserve (synth engines, mining teachers, train workers, serve
    replicas at their maximum)."""
    needs: dict[str, float] = {}
    if config.synth.enabled:
        gen = config.synth.generator
        needs["synth"] = gen.cpus_per_engine * gen.concurrency
    if config.mine.enabled:
        needs["mine"] = max((t.num_cpus for t in config.mine.teachers), default=0.0)
    if config.train.enabled:
        needs["train"] = config.train.num_workers * config.train.cpus_per_worker
    needs["serve"] = config.serve.num_cpus * config.serve.autoscaling.max_replicas
    return needs


def stage_custom_resources(config: EmbedforgeConfig) -> dict[str, set[str]]:
    """The custom Ray resources (node pinning) each enabled stage's actors or workers ask for."""
    needs: dict[str, set[str]] = {}
    if config.synth.enabled:
        needs["synth"] = set(config.synth.generator.resources)
    if config.mine.enabled:
        needs["mine"] = {name for t in config.mine.teachers for name in t.resources}
    if config.train.enabled:
        needs["train"] = set(config.train.resources)
    if config.evaluate.enabled:
        needs["evaluate"] = set(config.evaluate.resources)
    needs["serve"] = set(config.serve.resources)
    return {stage: names for stage, names in needs.items() if names}


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
    for stage, names in stage_custom_resources(config).items():
        missing = sorted(name for name in names if cluster.get(name, 0.0) <= 0)
        if missing:
            problems.append(f"{stage} runs only on nodes with the resources {missing}; no node has them now")
    return problems
