"""The statistics table printed at the end of mining (as sentence-transformers' miner does): score
distributions of positives and kept negatives, candidates removed by each filter, queries with too few negatives.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from embedforge.mine.selection import DROP_REASONS


@dataclass
class MiningStats:
    """Accumulates over input examples; `drops` counts each query's removed candidates once."""

    positive_scores: list[float] = field(default_factory=list)
    negative_scores: list[float] = field(default_factory=list)
    drops: Counter[str] = field(default_factory=Counter)
    inputs: int = 0  # input examples seen (one per (query, positive))
    too_few: int = 0
    round_trip: int = 0  # input examples whose query failed round-trip consistency
    examples: int = 0

    def add(
        self,
        positive_score: float,
        negative_scores: list[float],
        drops: Counter[str],
        kept: bool,
        round_trip_failed: bool = False,
    ) -> None:
        self.inputs += 1
        self.drops.update(drops)
        if round_trip_failed:
            self.round_trip += 1
            return
        if not kept:
            self.too_few += 1
            return
        self.examples += 1
        self.positive_scores.append(positive_score)
        self.negative_scores.extend(negative_scores)

    def merge(self, other: MiningStats) -> None:
        self.positive_scores.extend(other.positive_scores)
        self.negative_scores.extend(other.negative_scores)
        self.drops.update(other.drops)
        self.inputs += other.inputs
        self.too_few += other.too_few
        self.round_trip += other.round_trip
        self.examples += other.examples

    def to_dict(self) -> dict[str, object]:
        return {
            "input_examples": self.inputs,
            "examples": self.examples,
            "dropped_too_few_negatives": self.too_few,
            "dropped_round_trip": self.round_trip,
            "negatives": len(self.negative_scores),
            "removed_by_filter": {reason: int(self.drops.get(reason, 0)) for reason in DROP_REASONS},
            "positive_scores": describe(self.positive_scores),
            "negative_scores": describe(self.negative_scores),
        }

    def table(self, title: str = "mining") -> str:
        rows = [
            f"== {title}: {self.inputs} input examples -> {self.examples} mined, "
            f"{len(self.negative_scores)} negatives, {self.too_few} dropped with too few negatives, "
            f"{self.round_trip} failing round-trip consistency"
        ]
        rows.append(
            f"{'scores':<10}{'count':>8}{'mean':>9}{'std':>9}{'min':>9}{'p25':>9}{'p50':>9}{'p75':>9}{'max':>9}"
        )
        for name, values in (("positive", self.positive_scores), ("negative", self.negative_scores)):
            d = describe(values)
            cells = "".join(
                f"{d[k]:>9.4f}" if d["count"] else f"{'-':>9}"
                for k in ("mean", "std", "min", "p25", "p50", "p75", "max")
            )
            rows.append(f"{name:<10}{d['count']:>8}{cells}")
        removed = ", ".join(f"{r}={self.drops.get(r, 0)}" for r in DROP_REASONS)
        rows.append(f"removed by filter: {removed}")
        return "\n".join(rows)


def describe(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    a = np.asarray(values, dtype=np.float64)
    p25, p50, p75 = np.percentile(a, [25, 50, 75])
    return {
        "count": int(a.size),
        "mean": float(a.mean()),
        "std": float(a.std()),
        "min": float(a.min()),
        "p25": float(p25),
        "p50": float(p50),
        "p75": float(p75),
        "max": float(a.max()),
    }
