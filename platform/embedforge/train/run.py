"""`run_train(config, run_dir)`: the thin Ray layer of the training stage.

Reads the examples (mined or straight from the sources), hands them to Ray Train as a Ray Data dataset, runs the
`TorchTrainer` (ScalingConfig, DDP backend and FailureConfig from config), then loads the final checkpoint into
the embedder, saves it at `run_dir/train/model/`, exports it (`export/merged`, `export/sentence_transformers`) and
draws the metric curves.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from embedforge.config import EmbedforgeConfig
from embedforge.runs.stage import StageRun, read_manifest
from embedforge.train.batching import StagePlan, in_plan_order, plan_stages
from embedforge.train.examples import load_training_examples, mined_dir, stage_sources
from embedforge.train.layout import ATTEMPTS, EXAMPLES, METRICS_CSV, RAY_DIR, STAGE
from embedforge.train.metrics import plot_curves, read_rows, throughput, training_seconds
from embedforge.train.tracking import TENSORBOARD_DIR

log = logging.getLogger(__name__)


def stage_settings(config: EmbedforgeConfig) -> tuple[dict[str, Any], str]:
    """What changes the trained model: model and train sections, the used sources, the data seed."""
    import hashlib

    used = set(stage_sources(config))
    settings = {
        "model": config.model.model_dump(mode="json"),
        "train": config.train.model_dump(mode="json", exclude={"resources"}),  # which nodes: same model
        "sources": [s.model_dump(mode="json") for s in config.data.sources if s.name in used],
        "data_seed": config.data.seed,
    }
    return settings, hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def checkpoint_key(digest: str, inputs: dict[str, str]) -> str:
    """The key a run's checkpoints carry and resume by: the stage's settings and the identities of the upstream
    outputs it trains on. A mining stage run again (other teachers, other negatives or soft labels) writes other
    examples, so the same train settings start over instead of resuming, or selecting, checkpoints trained on the
    earlier ones. A run with no upstream stage keeps its settings' hash."""
    import hashlib

    if not inputs:
        return digest
    return hashlib.sha256(json.dumps([digest, inputs], sort_keys=True).encode()).hexdigest()[:16]


def _inputs(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Path]:
    used = set(stage_sources(config))
    inputs = {s.path: run_dir / s.path for s in config.data.sources if s.name in used and s.kind == "run"}
    if mined_dir(run_dir) is not None:
        inputs["mine"] = run_dir / "mine"
    return inputs


def make_trainer(
    config: EmbedforgeConfig, out_dir: Path, config_hash: str, examples: dict, store: str | None = None
) -> Any:
    """The `TorchTrainer` for `config`, writing checkpoints and metrics under `out_dir`; with `store` (the train
    stage's folder in the run's object store) Ray Train keeps its checkpoints there and the workers publish their
    metrics and usage records there, so workers on any node reach the same run."""
    import ray.data
    from ray.train import CheckpointConfig, DataConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from embedforge.train.worker import train_loop_per_worker

    train = config.train
    rows = [ex.to_row() for name in sorted(examples) for ex in examples[name]]
    dataset = ray.data.from_items(rows)
    # each worker reads this small dataset once at start-up; its progress bar would otherwise linger and be
    # re-printed in the job log until the worker exits
    dataset.context.enable_progress_bars = False
    backend = train.backend if train.backend != "auto" else ("nccl" if train.use_gpu else "gloo")
    return TorchTrainer(
        train_loop_per_worker,
        train_loop_config={
            "config": config.model_dump(mode="json"),
            "config_hash": config_hash,
            "out_dir": str(out_dir),
            "store": store,
            "threads": max(1, int(train.cpus_per_worker)),
            # the worker logs to MLflow when the user's shell sets MLFLOW_TRACKING_URI (`train.tracking`), whatever
            # environment the cluster's processes were started with
            "tracking_env": {k: v for k, v in os.environ.items() if k.startswith("MLFLOW_")},
        },
        torch_config=TorchConfig(backend=backend),
        scaling_config=ScalingConfig(
            num_workers=train.num_workers, use_gpu=train.use_gpu, resources_per_worker=_resources(config)
        ),
        run_config=RunConfig(
            name=f"train-{config_hash}",
            storage_path=f"{store}/{RAY_DIR}" if store else str(out_dir / RAY_DIR),
            failure_config=FailureConfig(max_failures=train.max_failures),
            # selection scores every checkpoint of the run; otherwise the last two are enough to resume
            checkpoint_config=CheckpointConfig(num_to_keep=None if train.select_checkpoint else 2),
        ),
        datasets={EXAMPLES: dataset},
        dataset_config=DataConfig(datasets_to_split=[]),
    )


def _resources(config: EmbedforgeConfig) -> dict[str, float]:
    res = {**config.train.resources, "CPU": config.train.cpus_per_worker}
    if config.train.use_gpu:
        res["GPU"] = 1.0
    return res


def _clear_stale(stage: StageRun, digest: str, inputs: dict[str, str]) -> None:
    """Metrics, curves and attempts of a run with another config or other inputs must not mix with this one's, here
    or in the run's store where workers read them (checkpoints are kept: each carries its `checkpoint_key` and only
    matching ones resume)."""
    previous = read_manifest(stage.dir)
    if previous is not None and (previous.get("config_hash") != digest or previous.get("inputs") != inputs):
        events = stage.dir / TENSORBOARD_DIR
        stale = [METRICS_CSV, ATTEMPTS, *(f"{TENSORBOARD_DIR}/{p.name}" for p in events.glob("*"))]
        if stage.store is not None:
            stale += [f"{TENSORBOARD_DIR}/{name}" for name in stage.store.files(f"{STAGE}/{TENSORBOARD_DIR}")]
        for name in dict.fromkeys(stale):
            (stage.dir / name).unlink(missing_ok=True)
            if stage.store is not None:
                stage.store.delete(f"{STAGE}/{name}")


def run_train(config: EmbedforgeConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train the embedder on the configured stages into `run_dir/train/`; returns the manifest."""
    from embedforge.cluster.local import connect

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not config.train.stages:
        raise ValueError("train: no stages configured (train.stages is empty)")
    run_dir = Path(run_dir).resolve()
    settings, digest = stage_settings(config)
    stage = StageRun(run_dir, STAGE, settings, digest, _inputs(config, run_dir))
    if stage.is_complete():
        log.info("train: complete for config %s, skipping", digest)
        return read_manifest(stage.dir) or {}
    # the training stack (torch, transformers, peft) is imported only for a stage that runs
    from embedforge.train.checkpoint import latest_checkpoint, read_state
    from embedforge.train.finish import finish_training
    from embedforge.train.worker import stage_bounds

    check_matryoshka_dims(config)
    data = load_training_examples(config, run_dir)
    examples = data.examples
    # the workers plan the same batches from the same examples: a plan that cannot be filled (too few examples
    # for the batch size and negatives) fails here, before a Ray Train attempt, not in each of its retries
    check_query_room(config, plan_stages(in_plan_order(examples), config.train, config.train.num_workers))
    for st in config.train.stages:
        log.info(
            "train stage %s: %d examples per step (%d per worker x %d workers)",
            st.name, config.train.global_batch(st), st.batch_size, config.train.num_workers,
        )  # fmt: skip
    connect(num_cpus=int(config.resources.num_cpus) if config.resources.num_cpus else None)
    inputs = stage.input_identities()
    _clear_stale(stage, digest, inputs)
    stage.start()
    key = checkpoint_key(digest, inputs)
    resume = latest_checkpoint(stage.dir / RAY_DIR, key)
    if resume is not None:  # the workers load it (worker._restore): Ray Train 2 has no resume_from_checkpoint
        log.info("train: resuming from %s", resume)
    store = stage.store.child(STAGE) if stage.store else None
    trainer = make_trainer(config, stage.dir, key, examples, store)
    result = trainer.fit()
    if stage.store is not None:  # the checkpoints and metrics the workers left in the store (usage: complete())
        stage.store.pull(stage.dir / RAY_DIR, f"{STAGE}/{RAY_DIR}", exact=True)
        for name in (METRICS_CSV, ATTEMPTS, TENSORBOARD_DIR):
            stage.store.pull(stage.dir / name, f"{STAGE}/{name}")
    stage.time("fit", training_seconds(read_rows(stage.dir / METRICS_CSV)))
    if result.checkpoint is None:
        raise RuntimeError(f"train: Ray Train finished without a checkpoint (error: {result.error})")
    with result.checkpoint.as_directory() as ckpt:
        final = read_state(Path(ckpt))
    card = {
        "title": config.name,
        "training_run": {
            "run": stage.store.uri if stage.store is not None else str(run_dir),
            "config": config.name,
            "settings hash": digest,
            "steps": " + ".join(
                f"{s.name} {s.steps} at {config.train.global_batch(s)} examples" for s in config.train.stages
            ),
            "workers": config.train.num_workers,
        },
        "training_data": {name: len(found) for name, found in sorted(examples.items())},
        "data_origin": data.origin,
    }
    paths, selection = finish_training(config, stage, run_dir, key, final.global_step, card)
    plot = plot_curves(stage.dir / METRICS_CSV, stage.dir / "curves.png")
    rows = read_rows(stage.dir / METRICS_CSV)
    total = stage_bounds(config.train.stages)[-1][1]
    if final.global_step != total:
        raise RuntimeError(f"train: final checkpoint is at step {final.global_step}, expected {total}")
    return stage.complete(
        counts={"steps": final.global_step, **{f"examples.{k}": len(v) for k, v in examples.items()}},
        outputs={
            **paths,
            "metrics": str(stage.dir / METRICS_CSV),
            "curves": str(plot) if plot else None,
            "tensorboard": str(stage.dir / TENSORBOARD_DIR),
        },
        example_origin=data.origin,
        drops=data.drops,
        batch={
            s.name: {"per_worker": s.batch_size, "global": config.train.global_batch(s)} for s in config.train.stages
        },
        workers=config.train.num_workers,
        final_metrics=rows[-1] if rows else {},
        throughput=throughput(rows),
        checkpoint=str(result.checkpoint.path),
        selection=selection,
    )


def check_matryoshka_dims(config: EmbedforgeConfig) -> None:
    """Every truncated size of `train.matryoshka` lies below the backbone's embedding width (the full size is
    trained anyway); else fail before any stage starts."""
    dims = config.train.matryoshka.dims
    if not dims:
        return
    from embedforge.model.backbone_spec import read_backbone_spec
    from embedforge.models.bundled import resolve_model

    width = read_backbone_spec(resolve_model(config.model.backbone)).hidden_size
    if width is not None and dims[-1] >= width:
        raise ValueError(
            f"train.matryoshka.dims {dims}: every size must be below the width of {config.model.backbone}'s "
            f"embeddings ({width}), which is always trained"
        )


def check_query_room(config: EmbedforgeConfig, plans: list[StagePlan]) -> None:
    """Every planned query's instruction, with its in-context demonstrations (LGAI 4.2: placed before it), leaves
    room for the query text within `model.max_query_length`; else fail here, before any Ray Train attempt."""
    from embedforge.model.loading import query_framing_counter

    prefixes = {
        (item.example.instruction, tuple(item.demonstrations))
        for plan in plans
        for _, _, items in plan.global_batches
        for item in items
    }
    if not prefixes:
        return
    framing = query_framing_counter(config.model)
    need, (task, _) = max((framing(task, examples), (task, examples)) for task, examples in prefixes)
    limit = config.model.max_query_length
    if need >= limit:
        demos = " and its in-context examples" if config.train.in_context.fraction > 0 else ""
        raise ValueError(
            f"train: a query's instruction{demos} take {need} tokens (with the special tokens), leaving no room for "
            f"the query within model.max_query_length={limit}: raise it or shorten them (task: {task[:80]!r})"
        )
