"""The deploy decision: never serve a trained model that scores below the model it started from on the run's
validation slice (the synthetic queries held out of training, `synthetic_heldout`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from embedforge.evaluate.registry import HELDOUT_TASK


@dataclass(frozen=True)
class DeployDecision:
    deploy: str  # "trained" or "start"
    reason: str
    trained_score: float | None = None
    start_score: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decide(scores: dict[str, dict[str, float]], trained: str, start: str) -> DeployDecision:
    """`scores[task][model]` as evaluation reports them; `trained` and `start` are the two models' names there."""
    slice_scores = scores.get(HELDOUT_TASK, {})
    if trained not in slice_scores or start not in slice_scores:
        return DeployDecision(
            "trained", f"the run has no validation slice ({HELDOUT_TASK}) scored for both models to hold it back"
        )
    t, s = float(slice_scores[trained]), float(slice_scores[start])
    if t < s:
        return DeployDecision(
            "start", f"the trained model scores {t:.4f} < {s:.4f} of its starting model on {HELDOUT_TASK}", t, s
        )
    return DeployDecision("trained", f"the trained model scores {t:.4f} >= {s:.4f} on {HELDOUT_TASK}", t, s)
