"""Coarse-to-fine negative curriculum (MGH, seed 002, sections 2.1 and 4.1).

Synthetic examples carry 4 hard negatives with levels 1 (hardest) .. 4 (easiest). `mgh` feeds level 4 during the
first quarter of a stage's steps, then 3, 2 and 1; `reverse` goes 1 -> 4; `random` picks a level per step;
`fixed:N` always uses level N; `none` keeps the stored order (mined negatives come hardest first).
"""

from __future__ import annotations

import random


def level_for_step(curriculum: str, step: int, total_steps: int, rng: random.Random) -> int | None:
    """The negative level preferred at `step` (0-based) of a stage of `total_steps`, or None for no preference."""
    if curriculum == "none":
        return None
    quarter = min(3, step * 4 // max(total_steps, 1))
    if curriculum == "mgh":
        return 4 - quarter
    if curriculum == "reverse":
        return 1 + quarter
    if curriculum == "random":
        return rng.randint(1, 4)
    if curriculum.startswith("fixed:"):
        return int(curriculum.split(":", 1)[1])
    raise ValueError(f"unknown curriculum {curriculum!r}: use none, mgh, reverse, random or fixed:1..4")


def order_negatives(count: int, levels: list[int], level: int | None) -> list[int]:
    """Indices of an example's `count` negatives in preference order: the wanted level, then the nearest levels."""
    indices = list(range(count))
    if level is None or len(levels) != count:
        return indices
    return sorted(indices, key=lambda i: (abs(levels[i] - level), i))
