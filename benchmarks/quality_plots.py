"""Plots of the two quality results: the generalist recipe on datasets it never trained on (generalize.json) and
the documents profile on real queries (domain.json), each next to all-MiniLM-L6-v2 and the model the run started
from. `generalize.py` and `domain.py` draw theirs when they write a result; this script redraws both from the
committed JSON files:

    .venv/bin/python benchmarks/quality_plots.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from common import RESULTS

UNTRAINED, TRAINED, MINILM, TEACHERS = "tab:gray", "tab:blue", "tab:orange", "tab:green"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_generalize(result: dict[str, Any], path: Path) -> None:
    """Per task, the untrained backbone, the trained model and MiniLM: left-out tasks above, in-distribution below."""
    plt = _pyplot()
    summary = result["results"]["x1"]
    tasks = summary["tasks"]
    ordered = sorted(tasks, key=lambda t: (tasks[t]["data"] != "left out", t))
    fig, ax = plt.subplots(figsize=(8, 0.42 * len(ordered) + 1.6))
    height = 0.27
    bars = (
        ("backbone", "untrained backbone", UNTRAINED),
        ("trained", "trained", TRAINED),
        ("minilm", "all-MiniLM-L6-v2", MINILM),
    )
    for offset, (key, label, color) in enumerate(bars):
        ys = [i + (offset - 1) * height for i in range(len(ordered))]
        ax.barh(ys, [tasks[t][key] for t in ordered], height, color=color, label=label)
    ax.set_yticks(range(len(ordered)), [f"{t} ({tasks[t]['data']})" for t in ordered])
    ax.invert_yaxis()
    left_out = sum(tasks[t]["data"] == "left out" for t in ordered)
    ax.axhline(left_out - 0.5, color="black", linewidth=0.8)
    ax.set_xlabel("score x100 (nDCG@10, MAP, Spearman, AP, accuracy, V-measure)")
    ax.set_xlim(0, 100)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), ncol=3, frameon=False)
    ax.set_title(
        f"Generalist recipe: left-out average gain {summary['ood_avg_gain']:+.2f}, "
        f"worst left-out task {summary['ood_worst_task_delta']:+.2f}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_domain(result: dict[str, Any], path: Path) -> None:
    """Per corpus, nDCG@10 on its real queries of the starting model, MiniLM, the teachers' fused ranking and the
    trained model (the mean of its training seeds, each seed a tick), on an axis of its own (the corpora differ by 25
    points, the models by a few)."""
    plt = _pyplot()
    corpora = result["results"]
    fig, axes = plt.subplots(len(corpora), 1, figsize=(7, 1.9 * len(corpora) + 0.4), squeeze=False)
    rows = (
        ("start", "starting model", UNTRAINED),
        ("minilm", "all-MiniLM-L6-v2", MINILM),
        ("teachers_fusion", "teachers' fusion", TEACHERS),
        ("trained", "trained", TRAINED),
    )
    for ax, (corpus, outcome) in zip(axes[:, 0], corpora.items(), strict=True):
        scores = outcome["ndcg10"]
        for y, (key, _, color) in enumerate(rows):
            ax.plot([scores[key]], [y], "o", color=color, markersize=9)
            ax.annotate(f"{scores[key]:.2f}", (scores[key], y), textcoords="offset points", xytext=(8, -4))
        seeds = [run["ndcg10"]["trained"] for run in outcome["seeds"].values()]
        ax.plot(seeds, [len(rows) - 1] * len(seeds), "|", color=TRAINED, markersize=14)  # each seed's trained model
        ax.set_yticks(range(len(rows)), [label for _, label, _ in rows])
        ax.invert_yaxis()
        low = min(min(scores[k] for k, _, _ in rows), *seeds)
        high = max(max(scores[k] for k, _, _ in rows), *seeds)
        ax.set_xlim(low - 1, high + 1.5)
        ax.grid(axis="x", alpha=0.3)
        ax.set_title(
            f"{corpus}: trained - start {scores['trained'] - scores['start']:+.2f} (mean of {len(seeds)} seeds), "
            f"deployed {outcome['deployed_trained']}/{len(seeds)}",
            fontsize=9,
        )
    axes[-1, 0].set_xlabel("nDCG@10 x100 on the corpus's real queries (never read by the run)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


PLOTS = {"generalize": plot_generalize, "domain": plot_domain}


def main() -> None:
    for name, plot in PLOTS.items():
        plot(json.loads((RESULTS / f"{name}.json").read_text()), RESULTS / f"{name}.png")
        print(f"wrote {RESULTS / f'{name}.png'}")


if __name__ == "__main__":
    main()
