"""Hidden-state knowledge distillation (NV-Embed appendix A.2): L = L_contrastive + a * MSE(student, teacher).

Used to compress a model into a smaller student (e.g. after pruning layers); states of padding tokens are
excluded when a mask is given.
"""

from __future__ import annotations

import torch


def hidden_distill_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean squared error between student and (detached) teacher states (..., d), over unmasked positions."""
    if student.shape != teacher.shape:
        raise ValueError(
            f"hidden_distill: student {tuple(student.shape)} and teacher {tuple(teacher.shape)} differ; "
            "project the student to the teacher's width first"
        )
    sq = (student - teacher.detach()).pow(2).mean(dim=-1)
    if mask is None:
        return sq.mean()
    weights = mask.to(sq.dtype)
    return (sq * weights).sum() / weights.sum().clamp(min=1.0)
