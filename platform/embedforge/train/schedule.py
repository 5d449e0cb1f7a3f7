"""The per-stage optimizer and learning-rate schedule (NV-Embed 3.3 and appendix C).

Each stage restarts the optimizer with its own learning rate, a linear warm-up over `warmup_steps` and a linear
decay to zero at the stage's last step.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def make_optimizer(params: Iterable[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=lr, weight_decay=weight_decay)


def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the base learning rate for optimizer step `step` (0-based)."""
    if step < warmup_steps:
        return (step + 1) / (warmup_steps + 1)
    remaining = total_steps - warmup_steps
    if remaining <= 0:
        return 1.0
    return max(0.0, (total_steps - step) / remaining)


def make_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, warmup_steps, total_steps))
