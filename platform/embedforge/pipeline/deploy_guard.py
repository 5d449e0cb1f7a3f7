"""The deploy decision: never serve a trained model that does not beat the model it started from on the guard's
task (`evaluate.deploy_guard`): the run's validation slice (the synthetic queries held out of training,
`synthetic_heldout`) unless the user names a task of their own judged queries."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from embedforge.config.evaluate import HELDOUT_TASK, DeployGuard


@dataclass(frozen=True)
class DeployDecision:
    deploy: str  # "trained" or "start"
    reason: str
    trained_score: float | None = None
    start_score: float | None = None
    task: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(scores: dict[str, dict[str, float]], trained: str, start: str, guard: DeployGuard) -> DeployDecision:
    """`scores[task][model]` as evaluation reports them; `trained` and `start` are the two models' names there."""
    task, needed = guard.task, guard.min_gain
    task_scores = scores.get(task, {})
    if trained not in task_scores or start not in task_scores:
        named = f"validation slice ({task})" if task == HELDOUT_TASK else f"task {task}"
        return DeployDecision("trained", f"the run has no {named} scored for both models to hold it back", task=task)
    t, s = float(task_scores[trained]), float(task_scores[start])
    by = f" + {needed:g}" if needed else ""
    if t < s + needed:
        return DeployDecision(
            "start", f"the trained model scores {t:.4f} < {s:.4f}{by} of its starting model on {task}", t, s, task
        )
    return DeployDecision("trained", f"the trained model scores {t:.4f} >= {s:.4f}{by} on {task}", t, s, task)
