"""Ray layer for pairwise teachers: a pool of restartable actors (each loads its scorer once) that rescore
(query, document) pairs in batches, spread over the pool, answers in order. A killed actor is restarted and its
batch retried, so a crash changes nothing in the output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embedforge.cluster.device import assigned_device, model_dtype, record_usage
from embedforge.config.mine import TeacherConfig
from embedforge.mine.teachers.pairwise import load_pair_scorer


class _PairScoreActor:
    def __init__(self, teacher: dict, usage_dir: str | None) -> None:
        import torch

        config = TeacherConfig.model_validate(teacher)
        torch.set_num_threads(max(1, int(config.num_cpus)))
        self.device = assigned_device()
        self.scorer = load_pair_scorer(config, self.device)
        self.usage_dir = usage_dir

    def score(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        scores = self.scorer.score(pairs)
        if self.usage_dir is not None:
            record_usage(self.usage_dir, self.device, model_dtype(self.scorer))
        return scores


class PairScorerPool:
    """`score(pairs)` over `teacher.concurrency` Ray actors; a `PairScorer` like the local ones. The actors record
    where they ran in `usage_dir` when given."""

    def __init__(self, teacher: TeacherConfig, usage_dir: str | None = None) -> None:
        import ray
        from ray.util import ActorPool

        remote = ray.remote(max_restarts=-1, max_task_retries=-1)(_PairScoreActor)
        self.actors = [
            remote.options(num_cpus=teacher.num_cpus, num_gpus=teacher.num_gpus, resources=teacher.resources).remote(
                teacher.model_dump(mode="json"), usage_dir
            )
            for _ in range(teacher.concurrency)
        ]
        self.pool = ActorPool(self.actors)
        self.batch = teacher.batch_size * 4

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        batches = [list(pairs[i : i + self.batch]) for i in range(0, len(pairs), self.batch)]
        parts = list(self.pool.map(lambda actor, b: actor.score.remote(b), batches))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor)
