"""Checkpoint selection on the validation slice: the run's held-out synthetic queries (`synthetic_heldout`).

The documents profile (issue: a better embedder than the user already has) trains on synthetic queries only, so
the step count that serves real queries best is unknown; each kept checkpoint is scored on the queries held out of
training (NV-Embed 4.3's synthetic data, held out by document) and the best one becomes the trained model.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from embedforge.config import EmbedforgeConfig
from embedforge.evaluate.cached import CachedEncoder, RecordingEncoder
from embedforge.model.embedder import Embedder
from embedforge.model.protocol import TextEncoder
from embedforge.train.checkpoint import load_weights

if TYPE_CHECKING:
    from embedforge.evaluate.tasks import Task

log = logging.getLogger(__name__)
# a model that encodes its own documents is scored over the slice's documents plus a seeded sample of the
# collection, 2,000 in all: a fast proxy
SELECTION_CORPUS = 2000


def best_step(scores: dict[int, float]) -> int:
    """The highest score; a tie goes to the later step (the one training would have ended with)."""
    return max(scores, key=lambda step: (scores[step], step))


def _with_frozen_documents_cached(config: EmbedforgeConfig, embedder: Embedder, checkpoint: Path) -> TextEncoder:
    """With `model.frozen_documents`, documents are the starting model's vectors that mining put in the embedding
    cache, read back, not encoded again for each checkpoint (queries are named by the checkpoint's own folder)."""
    if not config.model.frozen_documents:
        return embedder
    from embedforge.embeddings.cache import cache_root

    return CachedEncoder(embedder, str(checkpoint), cache_root(config.mine.cache_dir))


def selection_task(config: EmbedforgeConfig, run_dir: Path) -> Task:
    """The validation slice as checkpoints are scored on it. With `model.frozen_documents` the documents' vectors
    are read from mining's cache, so the slice is scored exactly as evaluation scores it for the deploy guard: the
    checkpoint selected is the one the guard would rank first. Otherwise over the `SELECTION_CORPUS` proxy."""
    from embedforge.evaluate.registry import HELDOUT_TASK, build_task
    from embedforge.evaluate.run import limited_task

    task = build_task(HELDOUT_TASK, config.evaluate, run_dir)
    if config.model.frozen_documents:
        return limited_task(task, config)
    return task.limit_corpus(SELECTION_CORPUS, config.evaluate.seed)


def score_checkpoints(
    config: EmbedforgeConfig, run_dir: Path, checkpoints: dict[int, Path], threads: int
) -> tuple[dict[int, float], RecordingEncoder]:
    """nDCG@10 of each checkpoint on the validation slice (`selection_task`), encoding with `threads` torch
    threads, and the vectors of the best one (`best_step`), which evaluation of the model it becomes need not
    encode again (`evaluate.cached`)."""
    import torch

    from embedforge.evaluate.registry import HELDOUT_TASK
    from embedforge.evaluate.scoring import score_task
    from embedforge.train.trainable import build_trainable

    task = selection_task(config, run_dir)
    embedder = build_trainable(config)
    scores: dict[int, float] = {}
    best: RecordingEncoder | None = None
    # a Ray worker's torch may have started with another thread count (workers are reused): 1 thread made
    # selection 2x slower on 2 cores
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for step, folder in checkpoints.items():
            load_weights(folder, embedder)
            embedder.eval()
            recording = RecordingEncoder(_with_frozen_documents_cached(config, embedder, folder))
            with torch.no_grad():
                scores[step] = float(score_task(task, recording, batch_size=config.evaluate.batch_size)["main_score"])
            log.info("train: checkpoint at step %d scores %.4f on %s", step, scores[step], HELDOUT_TASK)
            if best_step(scores) == step:
                best = recording
    finally:
        torch.set_num_threads(previous)
    if best is None:
        raise ValueError("train: no checkpoint to select from")
    return scores, best
