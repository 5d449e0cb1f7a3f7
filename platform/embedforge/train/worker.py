"""The Ray Train loop run by every worker: plan, embed, loss, optimizer step, metrics, checkpoints, resume.

Two stages run back to back (NV-Embed 3.3), each with a fresh optimizer and warm-up. Every step is seeded from
(seed, global step, rank) and its batch comes from the deterministic plan, so after a worker failure Ray Train
restarts the group from the last checkpoint and the redone steps see the same data and dropout masks.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray.train
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from embedforge.cluster.device import model_dtype, record_usage
from embedforge.config import EmbedforgeConfig
from embedforge.config.train import StageConfig, TrainConfig
from embedforge.data.schema import TrainingExample
from embedforge.embeddings.cache import cache_root
from embedforge.logs import configure_worker_logging
from embedforge.model import Embedder, load_embedder
from embedforge.runs.stage import USAGE
from embedforge.runs.store import RunStore
from embedforge.train.batching import Batch, in_plan_order, plan_stages
from embedforge.train.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_optimizer,
    load_weights,
    read_state,
    save_checkpoint,
)
from embedforge.train.document_table import DocumentTable, frozen_document_texts
from embedforge.train.gradcache import gradcache_step, plain_step, rng_state, set_rng_state
from embedforge.train.inputs import Encoder, TextInput, batch_inputs, batch_targets, collection_targets
from embedforge.train.layout import ATTEMPTS, EXAMPLES, METRICS_CSV, RAY_DIR
from embedforge.train.metrics import Progress, append_row
from embedforge.train.objective import objective
from embedforge.train.schedule import make_optimizer, make_scheduler
from embedforge.train.tracking import TENSORBOARD_DIR, Trackers, flat_params
from embedforge.train.trainable import build_trainable

log = logging.getLogger(__name__)


def stage_bounds(stages: list[StageConfig]) -> list[tuple[int, int]]:
    """[start, end) global steps of each stage."""
    bounds, start = [], 0
    for stage in stages:
        bounds.append((start, start + stage.steps))
        start += stage.steps
    return bounds


def read_examples(shard: Any) -> dict[str, list[TrainingExample]]:
    """All examples of the (unsplit) dataset, grouped by source, in a fixed order whatever Ray Data's order."""
    grouped: dict[str, list[TrainingExample]] = {}
    for row in shard.iter_rows():
        ex = TrainingExample.from_row(row)
        grouped.setdefault(ex.task_name, []).append(ex)
    return in_plan_order(grouped)


def use_bf16(train: TrainConfig, device: torch.device) -> bool:
    if train.mixed_precision == "no":
        return False
    if train.mixed_precision == "bf16":
        return True
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def load_teacher(config: EmbedforgeConfig, device: torch.device) -> Encoder | None:
    """The frozen teacher of embedding distillation (NV-Embed A.2) or in-batch soft labels (LGAI 4.1), when a stage
    uses it.

    The run's own backbone as teacher (an anchor to the starting model) is loaded with the run's model settings, so
    it embeds exactly as the student did before training; any other teacher keeps its own."""
    if config.train.teacher is None or not any(s.losses.uses_teacher for s in config.train.stages):
        return None
    anchor = config.train.teacher == config.model.backbone
    teacher = load_embedder(config.model if anchor else config.train.teacher, device=device.type)
    teacher.requires_grad_(False)
    teacher.to(device)
    teacher.eval()
    return Encoder(teacher, micro_batch_size=config.train.micro_batch_size)


def frozen_documents(
    config: EmbedforgeConfig, embedder: Embedder, examples: dict[str, list[TrainingExample]]
) -> DocumentTable:
    """The fixed vectors of the collection (`mine.corpus`, as mining read it) and of every asymmetric example's
    documents (`model.frozen_documents`), from the embedding cache mining filled."""
    from embedforge.data.documents import collection_texts

    collection = collection_texts(config.mine.corpus) if config.mine.corpus else []
    texts = frozen_document_texts((ex for group in examples.values() for ex in group), collection)
    return DocumentTable.build(embedder, texts, cache_root(config.mine.cache_dir))


def step_seed(seed: int, global_step: int, rank: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}/{global_step}/{rank}".encode()).digest()[:4], "big")


def _world_pids(rank: int, world: int) -> list[int]:
    pids: list[Any] = [None] * world
    if world > 1:
        dist.all_gather_object(pids, os.getpid())
    else:
        pids[0] = os.getpid()
    return pids


def _restore(
    checkpoint: ray.train.Checkpoint | None, out_dir: Path, config_hash: str, store: RunStore | None
) -> Path | None:
    """A local copy of the newest checkpoint: Ray Train's, or a newer one already persisted in storage (the run's
    object store when it has one, pulled onto this worker's node)."""
    if store is not None:
        store.pull(out_dir / RAY_DIR, RAY_DIR)
    local = None
    if checkpoint is not None:
        local = Path(tempfile.mkdtemp(prefix="embedforge-resume-"))
        checkpoint.to_directory(str(local))
        state = read_state(local)
        if state.config_hash != config_hash:
            raise ValueError(f"checkpoint {checkpoint.path} is from config {state.config_hash}, not {config_hash}")
    stored = latest_checkpoint(out_dir / RAY_DIR, config_hash)
    if stored is not None and (local is None or read_state(stored).global_step > read_state(local).global_step):
        log.info("resuming from %s (newer than the checkpoint Ray Train registered)", stored)
        local = Path(tempfile.mkdtemp(prefix="embedforge-resume-"))
        shutil.copytree(stored, local, dirs_exist_ok=True)
    return local


class StepRunner:
    """One optimizer step on one worker's slice of the global batch.

    With GradCache on a single GPU, a step that runs out of GPU memory is redone with chunks of half the tokens
    (down to one text): the gradients are the same whatever the chunking, so a profile's chunk budget written for
    an H200 also trains on a smaller card. Several DDP workers could not redo a step together, so there the error
    stands, naming the setting to lower."""

    def __init__(
        self, encoder: Encoder, module: torch.nn.Module, train: TrainConfig, bf16: bool, teacher: Encoder | None
    ) -> None:
        self.encoder, self.module, self.train, self.bf16, self.teacher = encoder, module, train, bf16, teacher
        self.params = [p for p in encoder.embedder.parameters() if p.requires_grad]
        self.chunk_tokens = train.gradcache.chunk_tokens

    def _backward(
        self, queries: list[TextInput], documents: list[TextInput], loss_fn: Callable[..., Any]
    ) -> dict[str, float]:
        if not self.train.gradcache.enabled:
            return plain_step(self.encoder, queries, documents, loss_fn)[1]
        no_sync = self.module.no_sync if isinstance(self.module, DistributedDataParallel) else None
        return gradcache_step(
            self.encoder,
            queries,
            documents,
            loss_fn,
            self.train.gradcache.chunk_size,
            no_sync,
            lengths=self.encoder.token_lengths,
            chunk_tokens=self.chunk_tokens,
        )[1]

    def _smaller_chunks(self, device: torch.device, longest: int) -> bool:
        """Halve the GradCache chunks after running out of GPU memory (`longest`: the step's longest text in
        tokens); False when that cannot help."""
        if not self.train.gradcache.enabled or isinstance(self.module, DistributedDataParallel):
            return False
        budget = self.chunk_tokens or self.train.gradcache.chunk_size * longest
        if budget <= longest:  # one text per chunk already
            return False
        self.chunk_tokens = max(longest, budget // 2)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        log.warning(
            "GradCache ran out of GPU memory: redoing the step with chunks of at most %d tokens; "
            "set train.gradcache.chunk_tokens to start there",
            self.chunk_tokens,
        )
        return True

    def __call__(self, batch: Batch, stage: StageConfig, optimizer: torch.optim.Optimizer) -> dict[str, float]:
        queries, documents, per_example = batch_inputs(batch)
        targets = batch_targets(batch)
        if stage.losses.distills_over_collection and self.encoder.documents is not None:
            table = self.encoder.documents
            targets.collection = table.vectors
            targets.collection_rows, targets.collection_scores = collection_targets(batch, table)
        if stage.losses.uses_teacher and self.teacher is not None:
            # the teacher embeds each query as itself: in-context demonstrations (LGAI 4.2) are the student's
            bare = [replace(q, demonstrations=()) for q in queries]
            with torch.no_grad():
                targets.teacher_queries = self.teacher(bare).float()
                targets.teacher_candidates = self.teacher(documents).float().reshape(len(queries), per_example, -1)

        def loss_fn(q: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            cands = d.float().reshape(len(queries), per_example, -1)
            return objective(q.float(), cands, targets, stage.losses, stage.in_batch_negatives, self.train.matryoshka)

        device = self.encoder.embedder.device
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()
        rng = rng_state()
        while True:
            self.encoder.tokens = 0
            try:
                with autocast:
                    metrics = self._backward(queries, documents, loss_fn)
                break
            except torch.OutOfMemoryError as err:
                longest = max(self.encoder.token_lengths([*queries, *documents]))
                if not self._smaller_chunks(device, longest):
                    if self.train.gradcache.enabled and isinstance(self.module, DistributedDataParallel):
                        raise torch.OutOfMemoryError(
                            "GradCache ran out of GPU memory on DDP workers, which cannot redo a step together: "
                            "lower train.gradcache.chunk_tokens"
                        ) from err
                    raise
                optimizer.zero_grad(set_to_none=True)
                set_rng_state(rng)  # the step again from its start: the same dropout masks as a fresh attempt
        metrics["gradcache_chunk_tokens"] = self.chunk_tokens or 0
        metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, self.train.max_grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        metrics["tokens"] = self.encoder.tokens
        return metrics


def train_loop_per_worker(loop_config: dict[str, Any]) -> None:
    """Entry point of every Ray Train worker. `loop_config`: config (JSON dict), config_hash, out_dir, threads."""
    configure_worker_logging()
    os.environ.update(loop_config.get("tracking_env") or {})
    config = EmbedforgeConfig.model_validate(loop_config["config"])
    train, config_hash = config.train, loop_config["config_hash"]
    out_dir = Path(loop_config["out_dir"])
    store = RunStore(loop_config["store"]) if loop_config.get("store") else None
    usage_location = f"{store.uri}/{USAGE}" if store else str(out_dir / USAGE)
    torch.set_num_threads(int(loop_config.get("threads", 1)))
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()

    examples = read_examples(ray.train.get_dataset_shard(EXAMPLES))
    plans = plan_stages(examples, train, world)
    bounds = stage_bounds(train.stages)
    total = bounds[-1][1]

    torch.manual_seed(train.seed)  # the same fresh adapters on every attempt
    device = ray.train.torch.get_device()
    bf16 = use_bf16(train, device)
    embedder = build_trainable(config, bf16)
    embedder.to(device)
    documents = frozen_documents(config, embedder, examples) if config.model.frozen_documents else None
    embedder.train()
    module: torch.nn.Module = embedder
    if world > 1:
        module = DistributedDataParallel(embedder, device_ids=[device] if device.type == "cuda" else None)
    runner = StepRunner(
        Encoder(embedder, module, train.micro_batch_size, documents),
        module,
        train,
        bf16,
        load_teacher(config, device),
    )

    resume_dir = _restore(ray.train.get_checkpoint(), out_dir, config_hash, store)
    state = read_state(resume_dir) if resume_dir else None
    if resume_dir:
        load_weights(resume_dir, embedder)
    global_step = state.global_step if state else 0
    pids = _world_pids(rank, world)
    attempt = 1
    if rank == 0:
        attempts = out_dir / ATTEMPTS
        if store is not None:  # the records of earlier attempts, maybe made on another node
            for name in (ATTEMPTS, METRICS_CSV):
                store.pull(out_dir / name, name)
        attempt = 1 + (len(attempts.read_text().splitlines()) if attempts.exists() else 0)
        with attempts.open("a") as f:
            f.write(json.dumps({"attempt": attempt, "resumed_from": global_step, "pids": pids, "time": time.time()}))
            f.write("\n")
        log.info(
            "train attempt %d: %d workers (pids %s), starting at step %d of %d",
            attempt,
            world,
            pids,
            global_step,
            total,
        )
    progress = Progress(total, global_step, train.log_every)
    trackers = None
    if rank == 0:
        params = flat_params({"model": config.model.model_dump(mode="json"), "train": train.model_dump(mode="json")})
        trackers = Trackers(out_dir, f"{config.name}-{config_hash}-attempt{attempt}", params, global_step)

    for index, (stage, plan) in enumerate(zip(train.stages, plans, strict=True)):
        start, end = bounds[index]
        if global_step >= end:
            continue
        optimizer = make_optimizer(embedder.parameters(), stage.learning_rate, train.weight_decay)
        scheduler = make_scheduler(optimizer, stage.warmup_steps, stage.steps)
        if resume_dir and state and state.stage_index == index and state.stage_step < stage.steps:
            load_optimizer(resume_dir, optimizer, scheduler)
        for stage_step in range(global_step - start, stage.steps):
            torch.manual_seed(step_seed(train.seed, global_step, rank))
            batch = plan.batch(stage_step, rank)
            lr = optimizer.param_groups[0]["lr"]
            t0 = time.perf_counter()
            metrics = runner(batch, stage, optimizer)
            scheduler.step()
            elapsed = time.perf_counter() - t0
            global_step += 1
            global_ids = [it.example.id for it in plan.global_batches[stage_step][2]]
            metrics.update(
                step=global_step,
                stage=stage.name,
                stage_step=stage_step + 1,
                attempt=attempt,
                source=batch.source,
                level=batch.level if batch.level is not None else "",
                lr=lr,
                step_s=round(elapsed, 4),
                tokens_per_s=round(metrics.pop("tokens") * world / elapsed, 1),
                time=time.time(),
                batch_hash=hashlib.sha256("|".join(global_ids).encode()).hexdigest()[:12],
            )
            checkpoint = None
            checkpoint_step = global_step % train.checkpoint_every == 0 or global_step == total
            if checkpoint_step and rank == 0:
                tmp = Path(tempfile.mkdtemp(prefix="embedforge-ckpt-"))
                save_checkpoint(
                    tmp,
                    embedder,
                    optimizer,
                    scheduler,
                    TrainState(global_step, index, stage_step + 1, stage.curriculum, batch.level, config_hash),
                )
                checkpoint = ray.train.Checkpoint.from_directory(str(tmp))
            if checkpoint_step:  # every rank: where it trained, in which precision, at what memory peak
                record_usage(usage_location, device.type, "bfloat16" if runner.bf16 else model_dtype(embedder))
            if trackers is not None:
                append_row(out_dir / METRICS_CSV, metrics)
                trackers.log(global_step, metrics)
                if checkpoint_step:  # on disk up to the step a resumed attempt starts from
                    trackers.flush()
                if store is not None and checkpoint_step:  # the driver reads them from the store after fit
                    for name in (METRICS_CSV, ATTEMPTS):
                        store.put(out_dir / name, name)
                    for events in trackers.dir.iterdir():
                        store.put(events, f"{TENSORBOARD_DIR}/{events.name}")
                progress.update(global_step, metrics)
            # Ray Train holds one unconsumed report and its controller takes it every 2 s, so reporting every step
            # stalls steps shorter than that (79 % overhead on the tiny model, git log): every rank reports
            # on the same steps, those that log or checkpoint; the CSV above keeps every step
            if checkpoint_step or global_step % train.log_every == 0:
                ray.train.report(
                    {k: v for k, v in metrics.items() if isinstance(v, int | float)},
                    checkpoint=checkpoint,
                    checkpoint_dir_name=f"checkpoint-step{global_step:06d}" if checkpoint else None,
                    delete_local_checkpoint_after_upload=True if checkpoint else None,
                )
    if trackers is not None:
        trackers.close()
    if resume_dir:
        shutil.rmtree(resume_dir, ignore_errors=True)
