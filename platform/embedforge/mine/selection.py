"""Positive-aware hard-negative selection (NV-Embed, seed 000, section 4.1.1, after NV-Retriever).

For one query, given the teacher's candidates with scores, drop in this order and count each reason:
`positive` (a candidate that is one of the query's positives), `query` (the query text itself), `duplicate` (a
text equal, after whitespace/case folding, to the query, a positive or a candidate already seen), `rank_range`
(teacher rank outside [lo, hi]), `min_score` (score below the minimum), `margin` (TopK-PercPos: score above
min positive score x margin; `absolute`: above min positive score - margin). When a query has several positives
the lowest positive score sets the threshold, so no kept negative outscores any positive's margin. Then keep the
top `num_negatives` survivors, or a seeded random sample of them (`sampling: random`), best first.

Before any of that, `max_positive_rank` applies round-trip consistency (Promptagator, Dai et al. 2023, 3.2): a
query whose best positive ranks below it among the teacher's candidates keeps no negatives and is dropped.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from embedforge.config.mine import SelectionConfig

DROP_REASONS = ("positive", "query", "duplicate", "rank_range", "min_score", "margin")


def normalise_text(text: str) -> str:
    """Texts equal under this are duplicates: case-folded, whitespace collapsed."""
    return " ".join(text.split()).casefold()


@dataclass
class Selection:
    """The kept negatives of one query (candidate indices, best first) and the per-reason drop counts."""

    kept: list[int]
    scores: list[float]
    drops: Counter[str] = field(default_factory=Counter)
    round_trip_failed: bool = False  # the query's best positive ranked below `max_positive_rank`


def positive_rank(candidate_scores: Sequence[float], positive_scores: Sequence[float]) -> int:
    """1 + how many candidates (positives excluded) score above the best positive."""
    best = max(positive_scores)
    return 1 + int(np.sum(np.asarray(candidate_scores, dtype=np.float64) > best))


def margin_threshold(positive_scores: Sequence[float], config: SelectionConfig) -> float | None:
    """The score above which a candidate is a likely false negative, or None when no margin applies."""
    if config.margin_type == "none" or not len(positive_scores):
        return None
    lowest = float(min(positive_scores))
    if config.margin_type == "perc_pos":
        return lowest * config.margin
    return lowest - config.margin


def select_negatives(
    candidate_texts: Sequence[str],
    candidate_scores: Sequence[float],
    positive_scores: Sequence[float],
    query: str,
    positives: Sequence[str],
    config: SelectionConfig,
    rng: np.random.Generator | None = None,
) -> Selection:
    """Apply every filter to one query's candidates (in teacher order, best first) and sample the negatives."""
    if len(candidate_texts) != len(candidate_scores):
        raise ValueError(f"{len(candidate_texts)} candidate texts but {len(candidate_scores)} scores")
    scores = np.asarray(candidate_scores, dtype=np.float64)
    if scores.size > 1 and np.any(np.diff(scores) > 1e-9):
        raise ValueError("candidates must be given best first (scores non-increasing)")
    positive_exact = set(positives)
    if config.max_positive_rank is not None and len(positive_scores):
        others = [s for t, s in zip(candidate_texts, scores, strict=True) if t not in positive_exact]
        if positive_rank(others, positive_scores) > config.max_positive_rank:
            return Selection(kept=[], scores=[], round_trip_failed=True)
    positive_norm = {normalise_text(p) for p in positives}
    query_norm = normalise_text(query)
    threshold = margin_threshold(positive_scores, config)
    seen: set[str] = set()
    drops: Counter[str] = Counter()
    survivors: list[int] = []
    rank = 0
    for i, (text, score) in enumerate(zip(candidate_texts, scores, strict=True)):
        norm = normalise_text(text)
        if text in positive_exact:
            drops["positive"] += 1
            continue
        if text == query:
            drops["query"] += 1
            continue
        if norm in positive_norm or norm == query_norm or norm in seen:
            drops["duplicate"] += 1
            continue
        seen.add(norm)
        rank += 1
        if config.rank_range is not None and not config.rank_range[0] <= rank <= config.rank_range[1]:
            drops["rank_range"] += 1
            continue
        if config.min_score is not None and score < config.min_score:
            drops["min_score"] += 1
            continue
        if threshold is not None and score > threshold:
            drops["margin"] += 1
            continue
        survivors.append(i)
    if config.sampling == "random" and len(survivors) > config.num_negatives:
        if rng is None:
            raise ValueError("sampling 'random' needs a seeded rng")
        picked = rng.choice(len(survivors), size=config.num_negatives, replace=False)
        kept = [survivors[j] for j in sorted(picked)]
    else:
        kept = survivors[: config.num_negatives]
    return Selection(kept=kept, scores=[float(scores[i]) for i in kept], drops=drops)


NUM_LEVELS = 4  # MGH 2.1: negatives graded N1 (hardest) .. N4 (easiest)


def mined_levels(count: int) -> list[int]:
    """MGH levels for mined negatives listed hardest first: four equal bands of the teacher's ranking, N1 .. N4."""
    return [1 + (NUM_LEVELS * i) // count for i in range(count)]


def merge_negatives(
    given: Sequence[str], given_levels: Sequence[int], mined: Sequence[str], mined_scores: Sequence[float]
) -> dict[str, tuple[int, float]]:
    """Negative text -> (MGH level, teacher score), the example's given negatives first, then the mined ones.

    Given negatives (the generator's level-tagged negatives, MGH 2.1) keep their levels; without levels they are
    N1, the hardest: the data itself says they are close but wrong. Their score is NaN
    here (the caller fills in the teacher's when it has one). Mined negatives get levels from their rank bands
    (`mined_levels`); a mined text that is also given is kept once, as given."""
    if given_levels and len(given_levels) != len(given):
        raise ValueError(f"{len(given_levels)} levels for {len(given)} given negatives")
    if len(mined) != len(mined_scores):
        raise ValueError(f"{len(mined)} mined negatives but {len(mined_scores)} scores")
    merged: dict[str, tuple[int, float]] = {}
    for i, text in enumerate(given):
        merged.setdefault(text, (int(given_levels[i]) if given_levels else 1, math.nan))
    for text, level, score in zip(mined, mined_levels(len(mined)), mined_scores, strict=True):
        merged.setdefault(text, (level, float(score)))
    return merged
