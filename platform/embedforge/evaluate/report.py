"""The evaluation report: per-task and per-family tables, Borda ranking, deltas vs a baseline, and a bar chart.

Borda count follows LGAI-Embedding section 5.1 (as the MTEB leaderboard ranks models): on every task each model
gets one point per model it beats (ties share), and models are ranked by their total. Family scores are the
mean of the main scores of the family's tasks (NV-Embed 5 reports MTEB the same way). Scores are shown x100.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from embedforge.evaluate.tasks import FAMILIES


def borda(scores: dict[str, dict[str, float]], models: list[str]) -> dict[str, float]:
    """`scores[task][model]` -> Borda points per model; a model missing a task gets no points for it."""
    points = dict.fromkeys(models, 0.0)
    for per_model in scores.values():
        present = [m for m in models if m in per_model]
        for m in present:
            beaten = sum(per_model[m] > per_model[o] for o in present if o != m)
            tied = sum(per_model[m] == per_model[o] for o in present if o != m)
            points[m] += beaten + tied / 2
    return points


def build_report(
    results: dict[str, dict[str, dict[str, Any]]],
    baseline: str | None = None,
    provenance: dict[str, str] | None = None,
    contamination: dict[str, int] | None = None,
    usage: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """`results[model][task]` = {"family", "main_metric", "main_score", "metrics", ...} -> the report dict.

    `provenance[task]` ("left out" / "in-distribution", see `registry.task_provenance`) labels each task and gives
    an average per label, so scores on data the run trained on never mix with scores on data it never saw.
    `contamination[task]` counts the task's scored units found in the run's training data; `usage[model]` is where
    the model was scored (`cluster.device.stage_usage`: device, GPUs, dtype, peak accelerator memory)."""
    models = list(results)
    if baseline is not None and baseline not in results:
        raise ValueError(f"baseline {baseline!r} was not evaluated; evaluated models: {models}")
    task_names = list(dict.fromkeys(t for per_task in results.values() for t in per_task))
    tasks: dict[str, Any] = {}
    for t in task_names:
        any_result = next(results[m][t] for m in models if t in results[m])
        tasks[t] = {
            "family": any_result["family"],
            "main_metric": any_result["main_metric"],
            "scores": {m: results[m][t]["main_score"] for m in models if t in results[m]},
            "data": (provenance or {}).get(t),
        }
    families: dict[str, dict[str, float]] = {}
    for fam in FAMILIES:
        members = [t for t in task_names if tasks[t]["family"] == fam]
        if members:
            families[fam] = {
                m: float(np.mean([tasks[t]["scores"][m] for t in members if m in tasks[t]["scores"]]))
                for m in models
                if any(m in tasks[t]["scores"] for t in members)
            }
    average = {
        m: float(np.mean([tasks[t]["scores"][m] for t in task_names if m in tasks[t]["scores"]])) for m in models
    }
    by_provenance = {
        label: {m: _mean_over(tasks, [t for t in task_names if tasks[t]["data"] == label], m) for m in models}
        for label in dict.fromkeys(tasks[t]["data"] for t in task_names if tasks[t]["data"])
    }
    points = borda({t: tasks[t]["scores"] for t in task_names}, models)
    ranking = sorted(models, key=lambda m: (-points[m], -average[m]))
    report: dict[str, Any] = {
        "models": models,
        "tasks": tasks,
        "families": families,
        "average": average,
        "average_by_data": by_provenance,
        "contamination": {t: n for t, n in (contamination or {}).items() if n},
        "borda": points,
        "ranking": ranking,
        "baseline": baseline,
        "usage": usage or {},
        "details": results,
    }
    if baseline is not None:
        report["deltas"] = {
            m: {
                t: tasks[t]["scores"][m] - tasks[t]["scores"][baseline]
                for t in task_names
                if m in tasks[t]["scores"] and baseline in tasks[t]["scores"]
            }
            for m in models
            if m != baseline
        }
    return report


def _mean_over(tasks: dict[str, Any], names: list[str], model: str) -> float | None:
    values = [tasks[t]["scores"][model] for t in names if model in tasks[t]["scores"]]
    return float(np.mean(values)) if values else None


def percent(value: float | None) -> str:
    """A score x100 with two decimals, "-" where a model has none."""
    return "-" if value is None else f"{100 * value:.2f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *("| " + " | ".join(r) + " |" for r in rows)]


def to_markdown(report: dict[str, Any]) -> str:
    models = report["models"]
    lines = [
        "# Evaluation report",
        "",
        "Main scores x100 (retrieval nDCG@10, reranking MAP, STS Spearman of cosine, "
        "pair classification AP of cosine, classification accuracy, clustering V-measure).",
        "",
        "## Per task",
        "",
    ]
    rows = [
        [
            t,
            info["family"],
            info.get("data") or "-",
            info["main_metric"],
            *(percent(info["scores"].get(m)) for m in models),
        ]
        for t, info in report["tasks"].items()
    ]
    lines += _table(["task", "family", "data", "metric", *models], rows)
    if report.get("contamination"):
        seen = ", ".join(f"{t} {n}" for t, n in report["contamination"].items())
        lines += [
            "",
            f"Scored units found in the run's training data (dropped or marked, evaluate.contamination): {seen}.",
        ]
    lines += ["", "## Per family", ""]
    rows = [[fam, *(percent(avg.get(m)) for m in models)] for fam, avg in report["families"].items()]
    rows.append(["**average (all tasks)**", *(percent(report["average"][m]) for m in models)])
    for label, avg in report.get("average_by_data", {}).items():
        rows.append([f"**average ({label} tasks)**", *(percent(avg.get(m)) for m in models)])
    lines += _table(["family", *models], rows)
    lines += ["", "## Borda ranking (LGAI-Embedding 5.1)", ""]
    rows = [
        [str(i + 1), m, f"{report['borda'][m]:g}", percent(report["average"][m])]
        for i, m in enumerate(report["ranking"])
    ]
    lines += _table(["rank", "model", "Borda points", "average"], rows)
    if report.get("usage"):
        lines += ["", "## Where each model ran", ""]
        rows = [
            [m, u["device"], str(u["device_count"]), str(u["dtype"]), f"{u['peak_accelerator_memory_mb']:g}"]
            for m, u in report["usage"].items()
        ]
        lines += _table(["model", "device", "GPUs", "dtype", "peak accelerator MiB"], rows)
    if report.get("deltas"):
        base = report["baseline"]
        lines += ["", f"## Deltas vs `{base}` (x100)", ""]
        others = list(report["deltas"])
        rows = [
            [t, *(f"{100 * report['deltas'][m][t]:+.2f}" if t in report["deltas"][m] else "-" for m in others)]
            for t in report["tasks"]
        ]
        lines += _table(["task", *others], rows)
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> Path:
    """Grouped bars: main score per task (top) and per family plus the average (bottom), one colour per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = report["models"]
    panels = [
        ("main score per task (x100)", list(report["tasks"]), lambda m, t: report["tasks"][t]["scores"].get(m)),
        (
            "mean main score per family (x100)",
            [*report["families"], "average"],
            lambda m, f: report["average"][m] if f == "average" else report["families"][f].get(m),
        ),
    ]
    fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.1 * len(report["tasks"]) + 3), 9))
    width = 0.8 / max(len(models), 1)
    for ax, (title, labels, value) in zip(axes, panels, strict=True):
        x = np.arange(len(labels))
        for i, m in enumerate(models):
            heights = [100 * (value(m, lab) or 0.0) for lab in labels]
            ax.bar(x + (i - (len(models) - 1) / 2) * width, heights, width, label=m)
        ax.set_xticks(x, labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(report: dict[str, Any], folder: Path) -> dict[str, Path]:
    """report.json, report.md and report.png in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "report.json", "markdown": folder / "report.md", "png": folder / "report.png"}
    paths["json"].write_text(json.dumps(report, indent=2, default=float))
    paths["markdown"].write_text(to_markdown(report))
    plot(report, paths["png"])
    return paths
