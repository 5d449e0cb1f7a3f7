"""Ray layer for pairwise teachers: a pool of restartable actors (each loads its scorer once) that rescore
(query, document) pairs in batches, spread over the pool, answers in order. A killed actor is restarted and its
batch retried, so a crash changes nothing in the output.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embedforge.cluster.device import assigned_device
from embedforge.config.mine import TeacherConfig
from embedforge.mine.teachers.pairwise import load_pair_scorer


class _PairScoreActor:
    def __init__(self, teacher: dict) -> None:
        import torch

        config = TeacherConfig.model_validate(teacher)
        torch.set_num_threads(max(1, int(config.num_cpus)))
        self.scorer = load_pair_scorer(config, assigned_device())

    def score(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        return self.scorer.score(pairs)


class PairScorerPool:
    """`score(pairs)` over `teacher.concurrency` Ray actors; a `PairScorer` like the local ones."""

    def __init__(self, teacher: TeacherConfig) -> None:
        import ray
        from ray.util import ActorPool

        remote = ray.remote(max_restarts=-1, max_task_retries=-1)(_PairScoreActor)
        self.actors = [
            remote.options(num_cpus=teacher.num_cpus, num_gpus=teacher.num_gpus).remote(teacher.model_dump(mode="json"))
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
