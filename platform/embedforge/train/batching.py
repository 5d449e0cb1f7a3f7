"""Deterministic, resumable batch planning for one training stage.

- Task-homogeneous batches (paper 004, "task-conditioned sampling"): every global batch comes from one source.
- Weighted mixing: the source of each step is drawn with the stage's dataset weights; a source with `max_epochs` leaves
  the mix once the stage has drawn its examples that many times.
- A source with fewer examples than one global batch (a few synthetic examples from a small run) trains in smaller
  batches of its own rather than being dropped.
- No text twice in a batch (NV-Embed 3.3, recipe section 3): an example whose query or positive is already in the
  global batch waits for a later batch; negatives that collide are skipped; a shortfall of hard negatives is filled
  with other examples' positives from the same source (random negatives), and an example that still lacks
  negatives waits for a later batch while this one trains smaller.
- MGH curriculum picks which negative level each step prefers; LGAI 4.2 in-context demonstrations are drawn from
  the same source.

The whole plan is a pure function of (examples, stage, world size, seed), so step N of a resumed run sees exactly
the batch step N of the first run saw: the data position in a checkpoint is the step number.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
from collections import deque
from dataclasses import dataclass, field

from embedforge.config.train import InContextConfig, StageConfig, StageDataset, TrainConfig
from embedforge.data.schema import TrainingExample
from embedforge.train.curriculum import level_for_step, order_negatives

log = logging.getLogger(__name__)


@dataclass
class BatchItem:
    """One example as trained at one step: its chosen negatives, teacher scores and demonstrations."""

    example: TrainingExample
    negatives: list[str]
    teacher_scores: list[float]  # positive first, then the chosen negatives; NaN where the teacher gave none
    demonstrations: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Batch:
    """A worker's slice of one global batch; all items share source, task type and instruction."""

    step: int
    source: str
    level: int | None
    items: list[BatchItem]

    @property
    def ids(self) -> list[str]:
        return [item.example.id for item in self.items]


def _seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "big")


class StagePlan:
    """The global batches of one stage, split per worker with `batch(step, rank)`."""

    def __init__(
        self,
        examples: dict[str, list[TrainingExample]],
        stage: StageConfig,
        world_size: int,
        seed: int,
        in_context: InContextConfig | None = None,
    ) -> None:
        self.stage = stage
        self.world_size = world_size
        self.in_context = in_context or InContextConfig()
        # a source too small for one task-homogeneous global batch (a few synthetic examples, say) trains in smaller
        # batches: as many distinct examples as it has, split evenly over the workers; it is left out only when it
        # cannot give every worker one example, and the stage fails only when no source is left
        self.rank_sizes: dict[str, int] = {}
        self.left_out: dict[str, int] = {}
        for d in stage.datasets:
            rows = examples.get(d.source, [])
            size = min(stage.batch_size, _distinct_capacity(rows) // world_size)
            if size == 0:
                self.left_out[d.source] = len(rows)
                log.warning(
                    "train stage %r: source %r left out: %d examples, fewer than one per worker (%d workers)",
                    stage.name,
                    d.source,
                    len(rows),
                    world_size,
                )
                continue
            self.rank_sizes[d.source] = size
            if size < stage.batch_size:
                log.warning(
                    "train stage %r: source %r has %d examples, fewer than one global batch (%d x %d workers): "
                    "its batches are %d per worker",
                    stage.name,
                    d.source,
                    len(rows),
                    stage.batch_size,
                    world_size,
                    size,
                )
        datasets = [d for d in stage.datasets if d.source not in self.left_out]
        if not datasets:
            raise ValueError(
                f"train stage {stage.name!r}: no source has one example per worker ({world_size} workers); "
                f"examples per source: {self.left_out}"
            )
        self.examples = {d.source: examples[d.source] for d in datasets}
        self._seed = seed
        self._epochs = dict.fromkeys(self.examples, 0)
        self._queues = {
            name: deque(random.Random(_seed(seed, stage.name, name)).sample(range(len(rows)), len(rows)))
            for name, rows in self.examples.items()
        }
        self.shortened: dict[str, int] = {}
        self.drawn = dict.fromkeys(self.examples, 0)  # examples planned per source
        self.global_batches = self._plan_steps(datasets, random.Random(_seed(seed, stage.name, "mix")))
        log.info(
            "train stage %r: %d steps draw %s",
            stage.name,
            stage.steps,
            ", ".join(
                f"{name} {count} examples ({count / len(self.examples[name]):.1f} epochs)"
                for name, count in self.drawn.items()
            ),
        )
        for name, count in self.shortened.items():
            log.warning(
                "train stage %r: %d batches of source %r are smaller than planned: some examples lacked %d "
                "negatives distinct from the rest of the batch",
                stage.name,
                count,
                name,
                stage.num_negatives,
            )

    def _plan_steps(
        self, datasets: list[StageDataset], mix: random.Random
    ) -> list[tuple[str, int | None, list[BatchItem]]]:
        """Each step's source drawn by weight among the sources that have not reached their `max_epochs`."""
        caps = {d.source: d.max_epochs * len(self.examples[d.source]) for d in datasets if d.max_epochs is not None}
        planned = []
        for step in range(self.stage.steps):
            open_sources = [d for d in datasets if self.drawn[d.source] < caps.get(d.source, math.inf)]
            if not open_sources:
                raise ValueError(
                    f"train stage {self.stage.name!r}: every source reached its max_epochs by step {step} of "
                    f"{self.stage.steps}; leave one source without max_epochs or raise them"
                )
            source = mix.choices([d.source for d in open_sources], [d.weight for d in open_sources])[0]
            planned.append(self._plan_step(step, source))
            self.drawn[source] += len(planned[-1][2])
        return planned

    def _next_example(self, source: str, taken: set[str], deferred: list[int]) -> int:
        queue = self._queues[source]
        rows = self.examples[source]
        for _ in range(2 * len(rows)):  # what is left of this epoch, then all of the next
            if not queue:  # new epoch, new order
                self._epochs[source] += 1
                order = random.Random(_seed(self._seed, self.stage.name, source, self._epochs[source]))
                queue.extend(order.sample(range(len(rows)), len(rows)))
            index = queue.popleft()
            ex = rows[index]
            if ex.query in taken or ex.positive in taken:
                deferred.append(index)
                continue
            return index
        # unreachable: a batch holds at most one example per group of linked texts (`_distinct_capacity`), and the
        # scan above sees every example, so an untouched group always gives one
        raise AssertionError(f"train stage {self.stage.name!r}: no free example in {source!r}; batch sizing is wrong")

    def _plan_step(self, step: int, source: str) -> tuple[str, int | None, list[BatchItem]]:
        rng = random.Random(_seed(self._seed, self.stage.name, "step", step))
        level = level_for_step(self.stage.curriculum, step, self.stage.steps, rng)
        rows = self.examples[source]
        taken: set[str] = set()
        deferred: list[int] = []
        chosen: list[int] = []
        for _ in range(self.rank_sizes[source] * self.world_size):
            index = self._next_example(source, taken, deferred)
            chosen.append(index)
            taken.update((rows[index].query, rows[index].positive))
        self._queues[source].extendleft(reversed(deferred))  # waiting examples go first next time
        # examples with the fewest hard negatives choose first, so one with a single negative is not left without it
        # by another that had more to choose from
        found: dict[int, tuple[list[str], list[float]]] = {}
        short: list[int] = []
        for index in sorted(chosen, key=lambda i: len(rows[i].negatives)):
            picked = self._negatives(rows[index], level, taken, rng, source)
            if picked is None:
                short.append(index)
            else:
                found[index] = picked
        kept = [index for index in chosen if index in found]
        if short:
            # a batch that cannot give every example its negatives trains the ones it can, in equal shares per
            # worker; the others go first next time
            kept = kept[: len(kept) // self.world_size * self.world_size]
            if not kept:
                raise ValueError(
                    f"train: cannot find {self.stage.num_negatives} distinct negatives for example "
                    f"{rows[short[0]].id} in {source!r}, even in a batch of one per worker"
                )
            self._queues[source].extendleft(reversed([i for i in chosen if i not in kept]))
            self.shortened[source] = self.shortened.get(source, 0) + 1
        items = []
        for index in kept:
            negatives, scores = found[index]
            items.append(BatchItem(rows[index], negatives, scores, self._demonstrations(rows[index], rng, source)))
        return source, level, items

    def _negatives(
        self, ex: TrainingExample, level: int | None, taken: set[str], rng: random.Random, source: str
    ) -> tuple[list[str], list[float]] | None:
        """`want` negatives distinct from every text in the batch, or None when the source has too few."""
        want = self.stage.num_negatives
        negatives: list[str] = []
        scores = [math.nan if ex.positive_score is None else ex.positive_score]
        for i in order_negatives(len(ex.negatives), ex.negative_levels, level):
            if len(negatives) == want:
                break
            text = ex.negatives[i]
            if text in taken:
                continue
            negatives.append(text)
            scores.append(ex.negative_scores[i] if ex.negative_scores else math.nan)
            taken.add(text)
        rows = self.examples[source]
        for _ in range(50 * want):
            if len(negatives) == want:
                break
            text = rows[rng.randrange(len(rows))].positive
            if text not in taken:
                negatives.append(text)
                scores.append(math.nan)
                taken.add(text)
        return (negatives, scores) if len(negatives) == want else None

    def _demonstrations(self, ex: TrainingExample, rng: random.Random, source: str) -> list[tuple[str, str]]:
        cfg = self.in_context
        if cfg.k == 0 or cfg.fraction == 0 or rng.random() >= cfg.fraction:
            return []
        rows = self.examples[source]
        picks = [rows[i] for i in rng.sample(range(len(rows)), min(len(rows), cfg.k + 1))]
        return [(d.query, d.positive) for d in picks if d.id != ex.id][: cfg.k]

    def batch(self, step: int, rank: int) -> Batch:
        source, level, items = self.global_batches[step]
        size = len(items) // self.world_size
        return Batch(step, source, level, items[rank * size : (rank + 1) * size])


def _distinct_capacity(rows: list[TrainingExample]) -> int:
    """The size of a batch a small source can always fill without a query or positive text twice, whatever order its
    examples come in: the number of groups of examples linked by a shared text (every group can give one)."""
    parent: dict[str, str] = {}

    def root(text: str) -> str:
        while parent.setdefault(text, text) != text:
            parent[text] = parent[parent[text]]
            text = parent[text]
        return text

    for ex in rows:
        parent[root(ex.query)] = root(ex.positive)
    return len({root(ex.query) for ex in rows})


def in_plan_order(grouped: dict[str, list[TrainingExample]]) -> dict[str, list[TrainingExample]]:
    """Each source's examples in one fixed order whatever order they arrived in, so every rank and the driver's
    check plan the same batches."""
    return {name: sorted(rows, key=lambda e: (e.id, e.query, e.positive)) for name, rows in grouped.items()}


def plan_stages(examples: dict[str, list[TrainingExample]], train: TrainConfig, world_size: int) -> list[StagePlan]:
    """Every stage's batch plan; raises ValueError naming the example when a batch cannot be filled."""
    return [StagePlan(examples, stage, world_size, train.seed, train.in_context) for stage in train.stages]
