"""Summaries of a synth run: drops by reason, judge score distribution, the judge's length bias, and a plot.

WildBench (seed 001) 3.2-3.3 notes that LLM judges favour longer answers; here the bias is measured as the
Pearson correlation between each judged example's score and its total text length, and reported.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np


def length_bias(scores: list[float], lengths: list[float]) -> float | None:
    """Pearson correlation of judge score with text length; None with fewer than 3 points or no variance."""
    if len(scores) < 3:
        return None
    s, n = np.asarray(scores, dtype=np.float64), np.asarray(lengths, dtype=np.float64)
    if s.std() == 0 or n.std() == 0:
        return None
    return float(np.corrcoef(s, n)[0, 1])


def summarize(shard_stats: list[dict[str, Any]]) -> dict[str, Any]:
    """Merge per-shard statistics into the manifest's counts, drops and judge report."""
    drops: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    judged: list[list[float]] = []
    for st in shard_stats:
        drops.update(st["drops"])
        counts.update(st["counts"])
        judged.extend(st["judged"])
    scores = [j[0] for j in judged]
    lengths = [j[1] for j in judged]
    judge = {
        "judged": len(judged),
        "mean_score": float(np.mean(scores)) if scores else None,
        "score_histogram": {str(k): v for k, v in sorted(Counter(int(s) for s in scores).items())},
        "mean_length_chars": float(np.mean(lengths)) if lengths else None,
        "length_bias_pearson": length_bias(scores, lengths),
    }
    return {"counts": dict(counts), "drops": dict(drops), "judge": judge}


def plot(shard_stats: list[dict[str, Any]], path: Path, title: str) -> Path | None:
    """Judge-score histogram and score-vs-length scatter (the length bias) as a PNG; None without judged rows."""
    judged = [j for st in shard_stats for j in st["judged"]]
    drops: Counter[str] = Counter()
    for st in shard_stats:
        drops.update(st["drops"])
    if not judged and not drops:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    scores = [j[0] for j in judged]
    axes[0].hist(scores, bins=np.arange(0.5, 11.5, 1.0), color="tab:blue")
    axes[0].set(title="judge score (1-10)", xlabel="score", ylabel="examples")
    axes[1].scatter([j[1] for j in judged], scores, s=10, alpha=0.6)
    bias = length_bias(scores, [j[1] for j in judged])
    axes[1].set(
        title=f"score vs length (r = {bias:.2f})" if bias is not None else "score vs length",
        xlabel="characters (query + positive + negatives)",
        ylabel="score",
    )
    reasons = sorted(drops.items(), key=lambda kv: kv[1])
    axes[2].barh([r for r, _ in reasons], [n for _, n in reasons], color="tab:red")
    axes[2].set(title="dropped, by reason", xlabel="items")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
