"""Embedding distillation after NV-Embed appendix A.2: L = L_contrastive + a * MSE(student, teacher).

NV-Embed matches hidden states to compress a model; here the states are the final pooled embeddings, so a student
of another depth needs no layer mapping, and the starting model as teacher anchors fine-tuning. Positions
excluded by a mask (padding, when states per token are given) do not count.
"""

from __future__ import annotations

import torch


def embedding_distill_loss(
    student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean squared error between student and (detached) teacher states (..., d), over unmasked positions."""
    if student.shape != teacher.shape:
        raise ValueError(
            f"embedding_distill: student {tuple(student.shape)} and teacher {tuple(teacher.shape)} differ; "
            "project the student to the teacher's width first"
        )
    sq = (student - teacher.detach()).pow(2).mean(dim=-1)
    if mask is None:
        return sq.mean()
    weights = mask.to(sq.dtype)
    return (sq * weights).sum() / weights.sum().clamp(min=1.0)
