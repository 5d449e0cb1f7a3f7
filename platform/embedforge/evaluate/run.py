"""`run_evaluate(config, run_dir, models)`: the Ray layer of evaluation (issue 7, recipe section 7).

Tasks are built once on the driver (seeded sample of `max_examples_per_task`) and scored in parallel by the
stage's `evaluate.concurrency` Ray actors, which load each model in turn (one copy per actor) and read the shared
embedding cache. Every (model, task) result is saved as soon as it is done, so an interrupted evaluation resumes
where it stopped; the report (Markdown, JSON, PNG) is written to `run_dir/evaluate/` and printed at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from embedforge.cluster.device import read_usage, stage_usage
from embedforge.config import EmbedforgeConfig
from embedforge.config.evaluate import TRAINED
from embedforge.embeddings.cache import cache_root as embeddings_cache_root
from embedforge.evaluate.contamination import run_training_texts
from embedforge.evaluate.registry import CONTAMINATED, build_task, selected_tasks, task_provenance
from embedforge.evaluate.report import build_report, to_markdown, write_report
from embedforge.evaluate.tasks import RerankingTask, RetrievalTask, Task
from embedforge.runs.stage import USAGE, StageRun
from embedforge.runs.store import store_of

log = logging.getLogger(__name__)
STAGE = "evaluate"


def trained_model_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "train" / "model"


def selection_vectors_dir(run_dir: Path) -> Path:
    """Where checkpoint selection keeps the trained model's vectors of the validation slice (`evaluate.cached`)."""
    return Path(run_dir) / "train" / "selection_vectors"


def model_references(config: EmbedforgeConfig, run_dir: Path, models: list[str] | None) -> dict[str, str]:
    """Report name -> loadable reference. Default: the run's trained model (when there is one) + baselines."""
    names = list(models) if models else ([TRAINED] if trained_model_dir(run_dir).is_dir() else [])
    if not models:
        names += [b for b in config.evaluate.baselines if b not in names]
    if not names:
        raise ValueError("nothing to evaluate: no trained model at run_dir/train/model and no evaluate.baselines")
    refs = {}
    for name in names:
        if name == TRAINED:
            if not trained_model_dir(run_dir).is_dir():
                raise FileNotFoundError(f"model 'trained': no trained model at {trained_model_dir(run_dir)}")
            store = store_of(run_dir)  # a run in object storage: actors on any node copy the model from there
            refs[name] = store.child("train/model") if store else str(trained_model_dir(run_dir))
        else:
            refs[name] = name
    return refs


def sized_models(refs: dict[str, str], dimensions: list[int]) -> dict[str, tuple[str, int | None]]:
    """Report name -> (reference, size its vectors are cut to): every model at full size (None), then at each of
    `evaluate.dimensions` as MODEL@SIZE."""
    sized: dict[str, tuple[str, int | None]] = {name: (ref, None) for name, ref in refs.items()}
    for name, ref in refs.items():
        sized.update({f"{name}@{size}": (ref, size) for size in dimensions})
    return sized


def stage_settings(config: EmbedforgeConfig, refs: dict[str, str], tasks: list[str]) -> tuple[dict[str, Any], str]:
    settings = {
        "evaluate": config.evaluate.model_dump(mode="json", exclude={"resources"}),  # which nodes: same scores
        "model": config.model.model_dump(mode="json"),
        "models": refs,
        "tasks": tasks,
    }
    return settings, hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def cache_root(config: EmbedforgeConfig) -> str:
    return embeddings_cache_root(config.evaluate.cache_dir)


def _slug(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:12]


def results_dir(stage_dir: Path, model: str) -> Path:
    """Where `model`'s per-task results (`<task>.json`) are saved as they come in."""
    return stage_dir / "results" / _slug(model)


def usage_dir(stage_dir: Path, model: str) -> Path:
    """Where the workers scoring `model` record their device, dtype and peak accelerator memory (local)."""
    return stage_dir / USAGE / _slug(model)


class _Worker:
    """A Ray actor on the device Ray assigned it, holding one model at a time: `load` replaces the model it holds
    (the stage's actors score every model in turn, so each process and its imports start once per stage, not once
    per model), `score` scores one task and records where it ran in the model's usage folder."""

    def __init__(self, cache: str | None, batch_size: int, seed: int, threads: int) -> None:
        import torch

        from embedforge.cluster.device import assigned_device

        torch.set_num_threads(threads)
        self.device = assigned_device()
        self.cache, self.batch_size, self.seed = cache, batch_size, seed
        self.encoder: Any = None
        self.cached: Any = None  # the encoder's embedding cache, when the stage keeps one

    def load(self, ref: str, name: str, model_config: dict[str, Any], usage_dir: str, dimensions: int | None) -> None:
        import gc

        import torch

        from embedforge.cluster.device import model_dtype
        from embedforge.config.model import ModelConfig
        from embedforge.embeddings.matryoshka import TruncatedEncoder
        from embedforge.evaluate.cached import CachedEncoder
        from embedforge.evaluate.models import load_model

        self.encoder = self.cached = None  # the previous model's memory is free before the next one loads
        gc.collect()
        if self.device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()  # each model's usage record shows its own peak, not the last one's
        encoder = load_model(ref, ModelConfig.model_validate(model_config), self.device)
        encoder.name = name
        self.dtype = model_dtype(encoder)
        self.cached = CachedEncoder(encoder, ref, self.cache) if self.cache else None
        self.encoder = self.cached or encoder
        self.usage_dir = usage_dir
        seeds = selection_vectors_dir(Path(ref).parents[1]) if name == TRAINED and "://" not in ref else None
        if self.cached is not None and seeds is not None and seeds.is_dir():
            log.info("model %s: %d vectors from checkpoint selection cached", name, self.cached.seed(seeds))
        if dimensions is not None:  # cut after the cache, which keeps the full vectors every size reads
            self.encoder = TruncatedEncoder(self.encoder, dimensions, name)

    def score(self, task: Task) -> dict[str, Any]:
        from embedforge.cluster.device import record_usage
        from embedforge.evaluate.scoring import score_task

        start = time.time()
        read, encoded = self._cache_counts()
        metrics = score_task(task, self.encoder, self.batch_size, self.seed)
        record_usage(self.usage_dir, self.device, self.dtype)
        read_after, encoded_after = self._cache_counts()
        return {
            "task": task.name,
            "family": task.family,
            "main_metric": task.main_metric,
            "main_score": metrics["main_score"],
            "metrics": metrics,
            "size": task.size(),
            "seconds": round(time.time() - start, 3),
            "texts": {"from_cache": read_after - read, "encoded": encoded_after - encoded},
        }

    def _cache_counts(self) -> tuple[int, int]:
        """Texts the model's embedding cache has served and texts it encoded so far (zeros without a cache)."""
        return (self.cached.hits, self.cached.misses) if self.cached is not None else (0, 0)


class _Workers:
    """The stage's actors (`evaluate.concurrency`, no more than there are tasks), started when the first model has
    a task to score and stopped with the stage."""

    def __init__(self, config: EmbedforgeConfig, tasks: int) -> None:
        self.config, self.count = config, min(config.evaluate.concurrency, tasks)
        self.actors: list[Any] = []

    def holding(self, name: str, ref: str, usage: str, dimensions: int | None) -> list[Any]:
        """The actors, each with model `ref` loaded under report name `name`, its vectors cut to `dimensions`."""
        import ray

        ev = self.config.evaluate
        if not self.actors:
            worker_cls = ray.remote(num_cpus=ev.cpus_per_worker, num_gpus=ev.gpus_per_worker, resources=ev.resources)(
                _Worker
            )
            cache = cache_root(self.config) if ev.cache else None
            threads = max(1, int(ev.cpus_per_worker))
            self.actors = [worker_cls.remote(cache, ev.batch_size, ev.seed, threads) for _ in range(self.count)]
        model_config = self.config.model.model_dump(mode="json")
        ray.get([actor.load.remote(ref, name, model_config, usage, dimensions) for actor in self.actors])
        return self.actors

    def stop(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
        self.actors = []


def _evaluate_model(
    name: str,
    ref: str,
    dimensions: int | None,
    tasks: list[Task],
    stage: StageRun,
    config_hash: str,
    workers: _Workers,
) -> dict[str, dict[str, Any]]:
    """Score `tasks` for one model (its vectors cut to `dimensions` when given) on the stage's actors, reusing
    results saved by an earlier attempt."""
    from ray.util import ActorPool

    folder = results_dir(stage.dir, name)
    results: dict[str, dict[str, Any]] = {}
    todo = []
    for task in tasks:
        saved = folder / f"{task.name}.json"
        if saved.is_file() and json.loads(saved.read_text()).get("config_hash") == config_hash:
            results[task.name] = json.loads(saved.read_text())
        else:
            todo.append(task)
    log.info("model %s: %d tasks to score, %d reused from an earlier attempt", name, len(todo), len(results))
    if not todo:
        return results
    pool = ActorPool(workers.holding(name, ref, stage.usage_location(_slug(name)), dimensions))
    start = time.time()
    folder.mkdir(parents=True, exist_ok=True)
    for i, result in enumerate(pool.map_unordered(lambda a, t: a.score.remote(t), todo), start=1):
        result["config_hash"], result["model"] = config_hash, name
        tmp = folder / f".{result['task']}.json.tmp"
        tmp.write_text(json.dumps(result, indent=2, default=float))
        tmp.replace(folder / f"{result['task']}.json")  # atomic: a resumed run never reads half a file
        results[result["task"]] = result
        elapsed = time.time() - start
        log.info(
            "model %s: %d/%d tasks, %s %s=%.4f (%d units in %.1fs; texts: %d encoded, %d from the cache), "
            "%.2f tasks/min",
            name,
            i,
            len(todo),
            result["task"],
            result["main_metric"],
            result["main_score"],
            result["size"],
            result["seconds"],
            result["texts"]["encoded"],
            result["texts"]["from_cache"],
            60 * i / elapsed,
        )
    return {t.name: results[t.name] for t in tasks}


def limited_task(task: Task, config: EmbedforgeConfig) -> Task:
    """The seeded sample of `task` that evaluation scores (per query for retrieval and reranking)."""
    ev = config.evaluate
    per_query = isinstance(task, RetrievalTask | RerankingTask) and ev.max_queries_per_task is not None
    task = task.limit(ev.max_queries_per_task if per_query else ev.max_examples_per_task, ev.seed)
    if isinstance(task, RetrievalTask):
        task = task.limit_corpus(ev.max_corpus_documents, ev.seed)
    return task


def run_evaluate(config: EmbedforgeConfig, run_dir: str | Path, models: list[str] | None = None) -> dict[str, Any]:
    """Evaluate `models` (default: trained + baselines) on the configured tasks; returns the stage manifest."""
    from embedforge.cluster.local import connect

    run_dir = Path(run_dir)
    ev = config.evaluate
    refs = model_references(config, run_dir, models)
    if ev.baseline_for_deltas is not None and ev.baseline_for_deltas not in refs:
        raise ValueError(
            f"evaluate.baseline_for_deltas {ev.baseline_for_deltas!r} is not among the evaluated models {list(refs)}"
        )
    names = selected_tasks(ev, run_dir)
    settings, digest = stage_settings(config, refs, names)
    inputs = {"train": run_dir / "train"} if TRAINED in refs else {}
    stage = StageRun(run_dir, STAGE, settings, digest, inputs)
    if stage.is_complete():
        log.info("evaluate: complete for this config, skipping (report at %s)", stage.dir / "report.md")
        print((stage.dir / "report.md").read_text())
        return json.loads((stage.dir / "manifest.json").read_text())
    stage.start()
    t0 = time.time()
    # no score on training data: every scored unit is checked against the texts the run trained on, before sampling
    seen = run_training_texts(config, run_dir) if TRAINED in refs else None
    full = [build_task(n, ev, run_dir) for n in names]
    contamination = {t.name: seen.contaminated_units(t) for t in full} if seen is not None else {}
    if seen is not None and ev.contamination == "drop":
        full = [seen.decontaminated(t) for t in full]
    marked = {n for n, units in contamination.items() if units and ev.contamination == "mark"}
    provenance = {n: CONTAMINATED if n in marked else task_provenance(n, config) for n in names}
    for task, units in contamination.items():
        if units:
            action = "dropped before scoring" if ev.contamination == "drop" else "task marked contaminated"
            log.warning("evaluate: %d scored units of %s are in the run's training data: %s", units, task, action)
    tasks = [limited_task(t, config) for t in full]
    stage.time("build_tasks", time.time() - t0)
    log.info(
        "evaluate: %d models x %d tasks (%s)", len(refs), len(tasks), ", ".join(f"{t.name}:{t.size()}" for t in tasks)
    )
    connect()
    # a task's saved result is reused only for the same config and the same upstream outputs: a retrained model
    # at the same path is scored again
    attempt = hashlib.sha256(json.dumps([digest, stage.input_identities()], sort_keys=True).encode()).hexdigest()[:16]
    results = {}
    workers = _Workers(config, len(tasks))
    try:
        for name, (ref, dimensions) in sized_models(refs, ev.dimensions).items():
            t0 = time.time()
            results[name] = _evaluate_model(name, ref, dimensions, tasks, stage, attempt, workers)
            stage.time(f"model:{name}", time.time() - t0)
    finally:
        workers.stop()
    stage.collect_usage()
    usage = {name: stage_usage(read_usage(usage_dir(stage.dir, name))) for name in results}
    report = build_report(results, ev.baseline_for_deltas, provenance, contamination, usage)
    paths = write_report(report, stage.dir)
    print(to_markdown(report))
    return stage.complete(
        counts={"models": len(results), "tasks": len(tasks)},
        report={k: str(v) for k, v in paths.items()},
        ranking=report["ranking"],
        average=report["average"],
        average_by_data=report["average_by_data"],
        usage_by_model=report["usage"],
        data={t: info["data"] for t, info in report["tasks"].items()},
        contamination={"policy": ev.contamination, "units": contamination},
        contaminated_eval_rows=len(marked),
        scores={t: info["scores"] for t, info in report["tasks"].items()},
    )
