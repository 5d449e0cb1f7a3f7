"""Training curves where ML engineers look first: TensorBoard event files in the run's train folder, and an MLflow
run when `MLFLOW_TRACKING_URI` is set, with the values metrics.csv records for every step.

`tensorboard --logdir runs/NAME/train` shows each loss term, the learning rate, the gradient norm, tokens per second
and step time under `train/`, and the checkpoint-selection scores under `selection/` when the run selects a
checkpoint on its validation slice. An attempt resumed from step N writes from step N + 1, and TensorBoard drops
the killed attempt's events from there on (`purge_step`), as metrics.csv keeps each step's last attempt. Events go
through TensorBoard's own writer, whose `flush` blocks until every queued event is on disk: a checkpoint step's
values survive a worker killed right after it.
MLflow is optional: the tracking URI set without the `mlflow` package installed, or a server that refuses the run,
gives one warning, never a failed training.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any

from embedforge.train.metrics import PLOTTED

log = logging.getLogger(__name__)
TENSORBOARD_DIR = "tensorboard"
SCALARS = (*PLOTTED, "step_s")  # the per-step numbers of metrics.csv


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The metrics row's numbers worth a curve (finite, among SCALARS)."""
    out = {}
    for name in SCALARS:
        value = metrics.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            out[name] = float(value)
    return out


class Trackers:
    """TensorBoard (always) and MLflow (with `MLFLOW_TRACKING_URI`) for one training attempt on rank 0."""

    def __init__(self, out_dir: Path, run_name: str, params: dict[str, Any], start_step: int = 0) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.dir = out_dir / TENSORBOARD_DIR
        purge_step = start_step + 1 if start_step else None  # the first step this attempt writes
        self.tensorboard = SummaryWriter(log_dir=str(self.dir), purge_step=purge_step, flush_secs=10)
        self.mlflow = _mlflow_run(run_name, params) if os.environ.get("MLFLOW_TRACKING_URI") else None

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        values = scalars(metrics)
        for name, value in values.items():
            self.tensorboard.add_scalar(f"train/{name}", value, step)
        if self.mlflow is not None:
            try:
                self.mlflow.log_metrics(values, step=step)
            except Exception as err:  # a tracking server's trouble never stops training
                log.warning("MLflow logging stopped at step %d: %s", step, err)
                self.mlflow = None

    def flush(self) -> None:
        self.tensorboard.flush()

    def close(self) -> None:
        self.tensorboard.close()
        if self.mlflow is not None:
            self.mlflow.end_run()


def log_selection(out_dir: Path, scores: dict[int, float], selected: int) -> None:
    """The validation-slice score of each checkpoint and the one selected, as TensorBoard scalars by step (and in
    the run's MLflow experiment, when tracking is on)."""
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(out_dir / TENSORBOARD_DIR)) as writer:
        for step, score in sorted(scores.items()):
            writer.add_scalar("selection/validation_ndcg10", score, step)
        writer.add_scalar("selection/selected_step", selected, selected)


def _mlflow_run(run_name: str, params: dict[str, Any]) -> Any:
    """The `mlflow` module with a run started (experiment `embedforge`), or None when mlflow is not installed."""
    try:
        import mlflow
    except ImportError:
        log.warning("MLFLOW_TRACKING_URI is set but the mlflow package is not installed (pip install mlflow-skinny)")
        return None
    try:
        mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "embedforge"))
        mlflow.start_run(run_name=run_name)
        mlflow.log_params(params)
    except Exception as err:  # an unreachable or refusing tracking server: training goes on without it
        log.warning("MLflow logging off: %s", str(err).splitlines()[0] if str(err) else type(err).__name__)
        return None
    return mlflow


def flat_params(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config section as MLflow parameters (`train.stages.0.steps`: "120"), values cut to 500 chars."""
    out: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, f"{name}."))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out.update(flat_params(item, f"{name}.{i}."))
        else:
            out[name] = str(value)[:500]
    return out
