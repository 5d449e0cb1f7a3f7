"""Per-step training metrics: a CSV in the run directory, progress lines with rates and ETA, a PNG of the curves.

Rows are appended as steps finish; after a worker failure the steps since the last checkpoint are done again and
appear twice (with a higher `attempt`): readers keep the last row of each step.
"""

from __future__ import annotations

import csv
import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)
PLOTTED = [
    "loss",
    "loss_infonce",
    "loss_pair_bce",
    "loss_distill",
    "loss_embedding_distill",
    "loss_matryoshka",
    "accuracy",
    "lr",
    "grad_norm",
    "tokens_per_s",
]
COLUMNS = ["step", "stage", "stage_step", "attempt", "source", "level", *PLOTTED, "step_s", "batch_hash", "time"]


def append_row(path: Path, row: dict[str, object]) -> None:
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k, "") for k in COLUMNS})


def read_rows(path: Path) -> list[dict[str, str]]:
    """The metrics rows, last attempt of each step, in step order."""
    if not path.exists():
        return []
    with path.open() as f:
        by_step = {int(r["step"]): r for r in csv.DictReader(f)}
    return [by_step[s] for s in sorted(by_step)]


def training_seconds(rows: list[dict[str, str]]) -> float:
    """Seconds the steps of `rows` (`read_rows`: the last attempt of each step) took, summed per attempt from the
    start of its first step to the end of its last: start-up, the steps a killed attempt did again after resuming
    and the time between a killed attempt and its resume are not counted."""
    spans: dict[str, tuple[float, float]] = {}
    for row in rows:
        end = float(row["time"])
        start = spans[row["attempt"]][0] if row["attempt"] in spans else end - float(row["step_s"])
        spans[row["attempt"]] = (start, end)
    return sum(end - start for start, end in spans.values())


def throughput(rows: list[dict[str, str]]) -> dict[str, float]:
    """The median step's seconds and tokens per second over all workers, from `read_rows`' rows (the median
    leaves out the first steps' warm-up and a resumed attempt's start-up)."""
    times = sorted(float(r["step_s"]) for r in rows if r.get("step_s") not in ("", None))
    rates = sorted(float(r["tokens_per_s"]) for r in rows if r.get("tokens_per_s") not in ("", None))
    if not times or not rates:
        return {}
    return {"steps": len(times), "step_s_median": times[len(times) // 2], "tokens_per_s_median": rates[len(rates) // 2]}


def plot_curves(path: Path, out: Path) -> Path | None:
    """Draw every non-empty metric against the step, one panel each, with stage boundaries marked."""
    rows = read_rows(path)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in PLOTTED if any(r[n] not in ("", None) for r in rows)]
    cols = 2
    fig, axes = plt.subplots((len(names) + 1) // cols, cols, figsize=(11, 2.6 * ((len(names) + 1) // cols)))
    steps = [int(r["step"]) for r in rows]
    boundaries = [steps[i] for i in range(1, len(rows)) if rows[i]["stage"] != rows[i - 1]["stage"]]
    for ax, name in zip(axes.flat, names, strict=False):
        points = [(s, float(r[name])) for s, r in zip(steps, rows, strict=True) if r[name] not in ("", None)]
        ax.plot([p[0] for p in points], [p[1] for p in points], lw=1.2)
        for b in boundaries:
            ax.axvline(b, color="grey", ls="--", lw=0.8)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    fig.suptitle("embedforge training (dashed: stage boundary)", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


class Progress:
    """Logs `step/total`, loss, rates and ETA every `every` steps."""

    def __init__(self, total: int, start: int, every: int) -> None:
        self.total, self.start, self.every = total, start, every
        self.t0 = time.perf_counter()

    def update(self, step: int, metrics: dict[str, float]) -> None:
        done = step - self.start
        if done <= 0 or (step % self.every and step != self.total):
            return
        elapsed = time.perf_counter() - self.t0
        rate = done / elapsed
        eta = (self.total - step) / rate if rate > 0 else float("inf")
        log.info(
            "train step %d/%d  loss %.4f  acc %.3f  lr %.2e  %.2f steps/s  %.0f tokens/s  ETA %.0fs",
            step,
            self.total,
            metrics.get("loss", float("nan")),
            metrics.get("accuracy", float("nan")),
            metrics.get("lr", float("nan")),
            rate,
            metrics.get("tokens_per_s", float("nan")),
            eta,
        )
