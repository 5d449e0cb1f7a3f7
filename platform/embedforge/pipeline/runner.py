"""Run the steps in order, log a banner and timing per stage, and keep `run_dir/pipeline.json` up to date.

A stage that skipped itself (its manifest was already complete for this config) is recorded as `skipped`: its
manifest's `finished_at` did not change across the call. The first failure stops the pipeline, is recorded with
its error in pipeline.json, and is raised as PipelineError naming the stage.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from embedforge.config import EmbedforgeConfig, config_hash
from embedforge.pipeline.resources import shortfalls, stage_gpus
from embedforge.pipeline.steps import Step, default_steps
from embedforge.runs.stage import git_revision, package_versions, read_manifest
from embedforge.runs.store import is_remote, staged

log = logging.getLogger(__name__)
PIPELINE_JSON = "pipeline.json"
_SUMMARY_KEYS = ("status", "config_hash", "counts", "drops", "timings")


class PipelineError(RuntimeError):
    """A pipeline step failed; the message names the step and the cause."""


def read_pipeline(run_dir: str | Path) -> dict[str, Any] | None:
    """A run's pipeline.json (from its store when `run_dir` is a URI); None before any pipeline ran there."""
    if not is_remote(run_dir):
        path = Path(run_dir) / PIPELINE_JSON
        return json.loads(path.read_text()) if path.is_file() else None
    with staged(run_dir) as local:
        return read_pipeline(local)


def _write(run_dir: Path, record: dict[str, Any]) -> None:
    tmp = run_dir / f".{PIPELINE_JSON}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(run_dir / PIPELINE_JSON)


def _finished_at(run_dir: Path, step: str) -> float | None:
    manifest = read_manifest(run_dir / step)
    return manifest.get("finished_at") if manifest else None


def _summary(run_dir: Path, step: str, result: dict[str, Any]) -> dict[str, Any]:
    """Counts, drops and timings from a stage manifest (not its copy of the config), or the step's own result."""
    if (run_dir / step / "manifest.json").is_file():
        out = {k: result[k] for k in _SUMMARY_KEYS if k in result}
        return {"manifest": str(run_dir / step / "manifest.json"), "stage": out}
    return result


def _banner(text: str) -> None:
    log.info("=" * 100)
    log.info(text)
    log.info("=" * 100)


def _preflight(config: EmbedforgeConfig) -> None:
    """Log what the config needs against what the cluster has now. A stage that the cluster cannot hold fails the
    run before its first step on a cluster that cannot grow (this project's local head, a private cluster); on a
    cluster named by RAY_ADDRESS an autoscaler may still add nodes, so there it is a warning."""
    import ray

    from embedforge.cluster.local import connect, fixed_size_cluster

    connect()
    have = {k: float(v) for k, v in ray.cluster_resources().items()}
    shown = {k: v for k, v in have.items() if k in ("CPU", "GPU")}
    log.info("cluster now: %s; GPUs needed per stage: %s", shown, stage_gpus(config))
    problems = shortfalls(config, have)
    if problems and fixed_size_cluster():
        raise PipelineError(
            f"{'; '.join(problems)}. This cluster cannot grow: lower those settings (`--set`) or run on a larger "
            "cluster (RAY_ADDRESS)"
        )
    for problem in problems:
        log.warning("%s (fine only if the autoscaler adds nodes)", problem)
    held = serve_applications()
    free = {k: float(v) for k, v in ray.available_resources().items()}
    busy = [p.replace(" now", " free now") for p in shortfalls(config, free)] if held and not problems else []
    if busy and fixed_size_cluster():
        raise PipelineError(
            f"{'; '.join(busy)}: the Serve application(s) {held} hold the rest of this cluster, which cannot grow. "
            "`serve shutdown -y` (RAY_ADDRESS set to the head) frees them; the run's deploy step serves again"
        )
    for problem in busy:
        log.warning("%s: Serve application(s) %s hold the rest; the stage waits for them", problem, held)


def serve_applications() -> list[str]:
    """The Serve applications running on the joined cluster (none when Serve does not run there)."""
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        return sorted(serve.status().applications)
    except RayServeException:  # no Serve controller on the cluster
        return []


def run_pipeline(
    config: EmbedforgeConfig,
    run_dir: str | Path,
    *,
    skip: Collection[str] = (),
    steps: Sequence[Step] | None = None,
    config_source: str | None = None,
) -> dict[str, Any]:
    """Run every enabled step not in `skip`; return the pipeline record also written to run_dir/pipeline.json."""
    steps = list(steps if steps is not None else default_steps())
    unknown = sorted(set(skip) - {s.name for s in steps})
    if unknown:
        raise ValueError(f"unknown step(s) to skip {unknown}; steps are {[s.name for s in steps]}")
    started = time.time()
    record: dict[str, Any] = {
        "name": config.name,
        "config_source": config_source,
        "config_hash": config_hash(config),
        "run_dir": str(run_dir) if is_remote(run_dir) else str(Path(run_dir).resolve()),
        "status": "running",
        "started_at": started,
        "git_revision": git_revision(),
        "package_versions": package_versions(),
        "steps": {},
    }
    active = [s for s in steps if s.enabled(config) and s.name not in skip]
    if "train" in {s.name for s in active}:  # settings that contradict the model they name fail before any step
        from embedforge.train.run import check_matryoshka_dims

        check_matryoshka_dims(config)
    _preflight(config)
    for step in steps:  # every step listed in order from the start: pending until it runs
        status = "pending" if step in active else "skipped by request" if step.name in skip else "disabled"
        record["steps"][step.name] = {"status": status}
    with staged(run_dir) as local:
        _write(local, record)
    for number, step in enumerate(active, 1):
        _banner(f"[{number}/{len(active)}] {step.name}: {step.title}")
        # each step in a run dir of its own: a run dir in object storage is pulled before and pushed after it
        with staged(run_dir) as local:
            _run_step(config, local, step, record)
        log.info("[%d/%d] %s %s in %.1fs", number, len(active), step.name, *_outcome(record, step.name))
    record.update(status="complete", finished_at=time.time(), seconds=round(time.time() - started, 3))
    with staged(run_dir) as local:
        _write(local, record)
    _banner(f"pipeline {config.name} complete in {record['seconds']:.1f}s; record at {run_dir}/{PIPELINE_JSON}")
    for name, info in record["steps"].items():
        log.info("  %-9s %-28s %s", name, info["status"], f"{info['seconds']:.1f}s" if "seconds" in info else "")
    return record


def _outcome(record: dict[str, Any], step: str) -> tuple[str, float]:
    return record["steps"][step]["status"], record["steps"][step]["seconds"]


def _run_step(config: EmbedforgeConfig, run_dir: Path, step: Step, record: dict[str, Any]) -> None:
    """Run one step in the local `run_dir`, recording its outcome in `record` and run_dir/pipeline.json."""
    before = _finished_at(run_dir, step.name)
    t0 = time.perf_counter()
    try:
        result = step.run(config, run_dir)
    except Exception as err:
        seconds = time.perf_counter() - t0
        record["steps"][step.name] = {"status": "failed", "seconds": round(seconds, 3), "error": repr(err)}
        record.update(status="failed", failed_step=step.name, finished_at=time.time())
        _write(run_dir, record)
        log.error("step %s failed after %.1fs: %r", step.name, seconds, err)
        raise PipelineError(f"pipeline step {step.name!r} failed: {err}") from err
    seconds = time.perf_counter() - t0
    after = _finished_at(run_dir, step.name)
    status = "skipped (already complete)" if before is not None and before == after else "complete"
    summary = _summary(run_dir, step.name, result)
    record["steps"][step.name] = {"status": status, "seconds": round(seconds, 3), **summary}
    _write(run_dir, record)
