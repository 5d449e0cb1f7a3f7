"""Soft-label distillation (LGAI-Embedding 4.1): match the teacher's score distribution over each example's
positive and hard negatives.

The teacher's scores (from mining: `positive_score`, `negative_scores`) become a target distribution
softmax(t / T_teacher); the student's cosines become softmax(s / T_student); the loss is
KL(teacher || student) averaged over the examples that carry teacher scores (others are masked out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def soft_label_distill_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    teacher_scores: torch.Tensor,
    teacher_temperature: float = 0.05,
    student_temperature: float = 0.05,
) -> torch.Tensor:
    """`teacher_scores` (B, C) aligned with `candidates` (B, C, d); rows holding any NaN have no teacher."""
    if teacher_scores.shape != candidates.shape[:2]:
        raise ValueError(
            f"distill: teacher scores {tuple(teacher_scores.shape)} do not match candidates "
            f"{tuple(candidates.shape[:2])}"
        )
    has_teacher = ~torch.isnan(teacher_scores).any(dim=1)
    if not bool(has_teacher.any()):
        return queries.sum() * 0.0
    student = torch.einsum("bd,bcd->bc", queries, candidates)[has_teacher] / student_temperature
    target = F.softmax(teacher_scores[has_teacher] / teacher_temperature, dim=1)
    return F.kl_div(F.log_softmax(student, dim=1), target, reduction="batchmean")
