"""Ray Data layer for dense teachers: stream texts through an actor pool (each actor loads its model once) and
write every vector to the embedding cache; nothing but counts comes back to the driver, so its memory does not
grow with the corpus. Texts already cached are skipped, so re-runs and resumes only encode what is new.
Rows are sorted by length before batching so batches pad little.

Actors may run on other nodes than the driver, each with a cache of its own. With a `publish` location (the run's
object store) every shard an actor writes is also copied there, and the driver pulls the published shards into
its cache before and after the pass: it never reads another node's disk, and a run resumed elsewhere reuses them.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from embedforge.cluster.device import assigned_device, model_dtype, record_usage
from embedforge.cluster.heap import release_freed_memory
from embedforge.config.mine import TeacherConfig
from embedforge.embeddings.cache import EmbeddingCache, pull_published
from embedforge.mine.teachers.dense import DenseIdentity, encode_side, load_dense_teacher

if TYPE_CHECKING:
    import ray

log = logging.getLogger(__name__)
EmbedRequest = tuple[str, str, str | None]  # (text, side, instruction)


class EmbedActor:
    """Ray Data callable class: encodes a batch of (text, side, instruction) rows into the cache, and records its
    device, dtype and peak accelerator memory in `usage_dir` when given; publishes each new shard at `publish`."""

    def __init__(
        self, teacher: dict, cache_root: str, usage_dir: str | None = None, publish: str | None = None
    ) -> None:
        import torch

        self.teacher = TeacherConfig.model_validate(teacher)
        torch.set_num_threads(max(1, int(self.teacher.num_cpus)))
        self.device = assigned_device()
        self.encoder = load_dense_teacher(self.teacher, self.device)
        self.usage_dir = usage_dir
        self.forward_batch = self.teacher.micro_batch_size or self.teacher.batch_size
        self.cache_root = cache_root
        self.publish = publish
        self.caches: dict[str, EmbeddingCache] = {}
        self.identity = DenseIdentity(self.teacher)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        groups: dict[tuple[str, str | None], list[str]] = {}
        for text, side, instruction, instructed in zip(
            batch["text"], batch["side"], batch["instruction"], batch["instructed"], strict=True
        ):
            groups.setdefault((str(side), str(instruction) if instructed else None), []).append(str(text))
        encoded = 0
        for (side, instruction), texts in groups.items():
            identity = self.identity(side, instruction)
            cache = self.caches.setdefault(identity, EmbeddingCache(self.cache_root, identity))
            todo = [texts[i] for i in cache.missing(texts)]
            if todo:
                vectors = encode_side(self.encoder, todo, side, instruction, self.forward_batch)
                shard = cache.put(todo, vectors)
                if self.publish is not None and shard is not None:
                    cache.publish(shard, self.publish)
                encoded += len(todo)
        if self.usage_dir is not None:
            record_usage(self.usage_dir, self.device, model_dtype(self.encoder))
        release_freed_memory()  # the actor's memory stays flat over a large corpus (cluster/heap.py)
        return {"encoded": np.array([encoded], dtype=np.int64), "rows": np.array([len(batch["text"])])}


def teacher_pool(size: int) -> ray.data.ActorPoolStrategy:
    """A Ray Data pool of `size` teacher actors that encode each batch on the actor's main thread.

    By default Ray Data hands a callable class's batches to a second thread of the actor, so that fetching and
    slicing the next block overlaps the call. torch's CPU kernels run slower there once the main thread has run
    torch work (the actor's constructor loads the model; OpenMP then keeps a thread team for each of the two
    threads): on this project's 2-core machine MiniLM encoded 1.2x fewer texts a second from the second thread
    than from the main one, and mining 38,752 texts took 154 s of Ray Data time instead of 133 s
    (benchmarks/results/mine.json). Encoding dominates a batch, so there is little to overlap."""
    import ray

    return ray.data.ActorPoolStrategy(size=size, enable_true_multi_threading=True)


def pending(requests: Iterable[EmbedRequest], teacher: TeacherConfig, cache_root: str) -> list[EmbedRequest]:
    """The distinct requests whose vectors are not cached yet."""
    identity = DenseIdentity(teacher)
    by_identity: dict[str, list[EmbedRequest]] = {}
    for req in dict.fromkeys(requests):
        by_identity.setdefault(identity(req[1], req[2]), []).append(req)
    out: list[EmbedRequest] = []
    for identity, reqs in by_identity.items():
        cache = EmbeddingCache(cache_root, identity)
        out.extend(reqs[i] for i in cache.missing([r[0] for r in reqs]))
    return out


def embed_into_cache(
    requests: Iterable[EmbedRequest],
    teacher: TeacherConfig,
    cache_root: str,
    usage_dir: str | None = None,
    publish: str | None = None,
) -> int:
    """Encode every request not yet cached through a Ray Data actor pool; returns how many were encoded. The
    actors record where they ran in `usage_dir` (a stage's `StageRun.usage_dir`) and publish their shards at
    `publish` (a URI), which the driver's cache pulls before and after the pass."""
    import ray

    if publish is not None:
        pull_published(publish, cache_root)

    todo = pending(requests, teacher, cache_root)
    if not todo:
        log.info("teacher %s: every text is cached", teacher.model)
        return 0
    todo.sort(key=lambda r: len(r[0]))
    table = pa.table(
        {
            "text": [r[0] for r in todo],
            "side": [r[1] for r in todo],
            "instruction": [r[2] or "" for r in todo],
            "instructed": [r[2] is not None for r in todo],
        }
    )
    # blocks cut here, not by `repartition`: that is a CPU task of its own, and when the actor pool holds every CPU
    # of the cluster (2 teachers x 1 CPU on a 2-CPU head) it would wait for a CPU forever
    rows = math.ceil(len(todo) / max(teacher.concurrency, math.ceil(len(todo) / (teacher.batch_size * 4))))
    ds = ray.data.from_arrow([table.slice(start, rows) for start in range(0, len(todo), rows)])
    ds = ds.map_batches(
        EmbedActor,
        fn_constructor_kwargs={
            "teacher": teacher.model_dump(mode="json"),
            "cache_root": cache_root,
            "usage_dir": usage_dir,
            "publish": publish,
        },
        batch_size=teacher.batch_size,
        compute=teacher_pool(teacher.concurrency),
        num_cpus=teacher.num_cpus,
        num_gpus=teacher.num_gpus,
        resources=teacher.resources,
    )
    started, done, encoded, last_log = time.time(), 0, 0, 0.0
    for out in ds.iter_batches(batch_size=None, batch_format="numpy"):
        done += int(out["rows"].sum())
        encoded += int(out["encoded"].sum())
        if time.time() - last_log > 10 or done == len(todo):
            elapsed = max(time.time() - started, 1e-9)
            log.info("teacher %s: embedded %d/%d texts (%.1f texts/s)", teacher.model, done, len(todo), done / elapsed)
            last_log = time.time()
    if publish is not None:
        pull_published(publish, cache_root)
    return encoded
