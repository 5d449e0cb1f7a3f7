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
- `collection_distill_loss`: the mined scores again, but the student's distribution is over the whole collection.
  With the document side frozen (`model.frozen_documents`) every document's vector is fixed, so the student scores
  each query against all of them: mass the student puts on documents the teachers did not rank is pushed down too,
  and the softmax is exact, not sampled (a listwise distillation of the teachers' ranking, as LGAI 4.1 distils
  over candidates).
"""

from __future__ import annotations

import math

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


def collection_distill_loss(
    queries: torch.Tensor,
    collection: torch.Tensor,
    candidate_rows: torch.Tensor,
    teacher_scores: torch.Tensor,
    teacher_temperature: float,
    student_temperature: float,
) -> torch.Tensor:
    """KL(teacher || student) with the teacher's softmax(t / T_t) over each query's scored candidates
    (`candidate_rows` (B, K) into `collection` (N, d), `teacher_scores` (B, K)) and the student's
    softmax(s / T_s) over every row of `collection`. A score that is not finite (NaN: unscored; -inf: padding of a
    shorter candidate list) gets no teacher mass, as every document outside the candidates; a query without any
    finite score is skipped."""
    if candidate_rows.shape != teacher_scores.shape:
        raise ValueError(
            f"distill: candidate rows {tuple(candidate_rows.shape)} do not match teacher scores "
            f"{tuple(teacher_scores.shape)}"
        )
    scored = torch.isfinite(teacher_scores)
    has_teacher = scored.any(dim=1)
    if not bool(has_teacher.any()):
        return queries.sum() * 0.0
    logits = torch.where(scored, teacher_scores, torch.full_like(teacher_scores, -math.inf))[has_teacher]
    target = F.softmax(logits.detach() / teacher_temperature, dim=1)
    student = F.log_softmax(queries[has_teacher] @ collection.T / student_temperature, dim=1)
    at_candidates = student.gather(1, candidate_rows[has_teacher])
    log_target = torch.where(target > 0, torch.log(target.clamp(min=1e-30)), torch.zeros_like(target))
    return (target * (log_target - at_candidates)).sum(dim=1).mean()
