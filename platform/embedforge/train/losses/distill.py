"""Soft-label distillation (LGAI-Embedding 4.1): match a teacher's score distribution over each query's candidates.

The teacher's scores become a target distribution softmax(t / T_teacher); the student's cosines become
softmax(s / T_student); the loss is KL(teacher || student) averaged over the queries that carry teacher scores
(others are masked out). Two sources of teacher scores:

- `soft_label_distill_loss`: the scores mining stored with each example (`positive_score`, `negative_scores`),
  over that example's own positive and hard negatives (LGAI 4.1 as written).
- `in_batch_distill_loss`: a frozen teacher embedder (`train.teacher`) scores every query against every candidate
  of the global batch, so each query gets a target over all B * C candidates instead of its own C. The teacher's
  soft labels make in-batch false negatives harmless (a near-duplicate gets its teacher score, not a 0), and the
  student learns the teacher's whole similarity structure, whatever the two models' widths.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from embedforge.train.distributed import gather_with_grad


def kl_to_teacher(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    teacher_temperature: float,
    student_temperature: float,
) -> torch.Tensor:
    """KL(softmax(teacher / T_t) || softmax(student / T_s)) over rows (B, C); rows holding any NaN are skipped."""
    has_teacher = ~torch.isnan(teacher_scores).any(dim=1)
    if not bool(has_teacher.any()):
        return student_scores.sum() * 0.0
    student = student_scores[has_teacher] / student_temperature
    target = F.softmax(teacher_scores[has_teacher].detach() / teacher_temperature, dim=1)
    return F.kl_div(F.log_softmax(student, dim=1), target, reduction="batchmean")


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
    student = torch.einsum("bd,bcd->bc", queries, candidates)
    return kl_to_teacher(student, teacher_scores, teacher_temperature, student_temperature)


def in_batch_distill_loss(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    teacher_queries: torch.Tensor,
    teacher_candidates: torch.Tensor,
    teacher_temperature: float = 0.05,
    student_temperature: float = 0.05,
) -> torch.Tensor:
    """Student `queries` (B, d) and `candidates` (B, C, d); the teacher's embeddings of the same texts (B, d_t) and
    (B, C, d_t). Candidates are gathered over workers in rank order, as InfoNCE gathers them."""
    if teacher_queries.shape[0] != queries.shape[0] or teacher_candidates.shape[:2] != candidates.shape[:2]:
        raise ValueError(
            f"distill: teacher embeddings {tuple(teacher_queries.shape)} / {tuple(teacher_candidates.shape)} do not "
            f"match the batch {tuple(queries.shape)} / {tuple(candidates.shape)}"
        )
    gathered, _ = gather_with_grad(candidates)
    teacher_gathered, _ = gather_with_grad(teacher_candidates.detach())
    student = queries @ gathered.reshape(-1, gathered.shape[-1]).T
    teacher = teacher_queries @ teacher_gathered.reshape(-1, teacher_gathered.shape[-1]).T
    return kl_to_teacher(student, teacher, teacher_temperature, student_temperature)
