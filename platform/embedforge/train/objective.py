"""The training objective of one stage: the weighted sum of the configured losses over a batch's embeddings.

L = w_nce * InfoNCE + w_bce * pair BCE + w_kd * soft-label KL + w_hd * MSE to a teacher's embeddings
(MGH eq. 1, paper 004 eq. 2/5, LGAI 4.1, NV-Embed A.2), plus, with `train.matryoshka`, the same terms on each
truncated size of the embeddings (Matryoshka Representation Learning, eq. 1). The soft labels come from mining's
stored scores (over each example's candidates, or with the student's distribution over the whole collection) or
from the frozen `train.teacher` over the whole batch.
In-batch negatives follow the stage (NV-Embed 3.3: on for stage-1 retrieval, off for the stage-2 blend).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from embedforge.config.train import DistillConfig, LossesConfig, MatryoshkaConfig
from embedforge.train.losses import (
    collection_distill_loss,
    embedding_distill_loss,
    in_batch_distill_loss,
    infonce_loss,
    pair_bce_loss,
    soft_label_distill_loss,
    truncated,
)
from embedforge.train.losses.pair_bce import graded_labels


@dataclass
class Targets:
    """Per-example supervision aligned with the candidates: teacher scores (B, C), graded relevance (B,) and,
    for embedding distillation, a frozen teacher's embeddings of the queries (B, d) and candidates (B, C, d)."""

    teacher_scores: torch.Tensor
    relevance: torch.Tensor
    max_relevance: torch.Tensor
    teacher_queries: torch.Tensor | None = None
    teacher_candidates: torch.Tensor | None = None
    # distill over the collection: its fixed vectors (N, d), and each query's mined candidates as rows of it (B, K)
    # with their scores (B, K; -inf pads a shorter list)
    collection: torch.Tensor | None = None
    collection_rows: torch.Tensor | None = None
    collection_scores: torch.Tensor | None = None


def _teacher_embeddings(targets: Targets, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    if targets.teacher_queries is None or targets.teacher_candidates is None:
        raise ValueError(f"{loss}: the batch carries no teacher embeddings (is train.teacher set?)")
    return targets.teacher_queries, targets.teacher_candidates


def positive_on_top(scores: torch.Tensor) -> torch.Tensor:
    """Mined scores (B, K) with each row's positive (column 0) raised to the row's highest finite score
    (`distill.positive: top`); a row without any finite score is left as it is."""
    finite = torch.where(torch.isfinite(scores), scores, torch.full_like(scores, -torch.inf))
    top = finite.max(dim=1).values
    raised = scores.clone()
    raised[:, 0] = torch.where(torch.isfinite(top), top, scores[:, 0])
    return raised


def _mined_target(scores: torch.Tensor, distill: DistillConfig) -> torch.Tensor:
    """The mined scores that distillation matches: as mining stored them, or with the positive on top."""
    return positive_on_top(scores) if distill.positive == "top" else scores


def objective(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    targets: Targets,
    losses: LossesConfig,
    in_batch: bool,
    matryoshka: MatryoshkaConfig | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Total loss and the value of each active term (plus in-batch accuracy) for logging. With `matryoshka` sizes,
    the terms are computed again on the first d coordinates of every embedding, renormalised (the collection's
    vectors too), and added with its weight (logged: `loss_matryoshka`, the cut sizes' mean); embedding
    distillation matches the teacher's full vectors only."""
    total, metrics = _terms(queries, candidates, targets, losses, in_batch, full_size=True)
    cut_terms = []
    for dim in matryoshka.dims if matryoshka else ():
        collection = None if targets.collection is None else truncated(targets.collection, dim)
        cut = replace(targets, collection=collection)
        term, _ = _terms(truncated(queries, dim), truncated(candidates, dim), cut, losses, in_batch, full_size=False)
        total = total + matryoshka.weight * term
        cut_terms.append(term.item())
    if cut_terms:
        metrics["loss_matryoshka"] = sum(cut_terms) / len(cut_terms)
    metrics["loss"] = total.item()
    return total, metrics


def _terms(
    queries: torch.Tensor,
    candidates: torch.Tensor,
    targets: Targets,
    losses: LossesConfig,
    in_batch: bool,
    full_size: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The weighted sum of the stage's losses over one size of the embeddings, and each term's value."""
    metrics: dict[str, float] = {}
    total = queries.sum() * 0.0
    nce, accuracy = infonce_loss(queries, candidates, losses.infonce.temperature, in_batch, losses.infonce.symmetric)
    metrics["accuracy"] = accuracy.item()
    if losses.infonce.weight > 0:
        total = total + losses.infonce.weight * nce
        metrics["loss_infonce"] = nce.item()
    if losses.pair_bce.weight > 0:
        z = graded_labels(targets.relevance, targets.max_relevance, losses.pair_bce.graded_floor)
        bce = pair_bce_loss(queries, candidates, losses.pair_bce.alpha, losses.pair_bce.beta, z, in_batch)
        total = total + losses.pair_bce.weight * bce
        metrics["loss_pair_bce"] = bce.item()
    if losses.distill.weight > 0:
        temperatures = (losses.distill.teacher_temperature, losses.distill.student_temperature)
        if losses.distill.scores == "teacher":
            teacher_queries, teacher_candidates = _teacher_embeddings(targets, "distill")
            kd = in_batch_distill_loss(queries, candidates, teacher_queries, teacher_candidates, *temperatures)
        elif losses.distill.over == "collection":
            if targets.collection is None or targets.collection_rows is None or targets.collection_scores is None:
                raise ValueError("distill over the collection: the batch carries no collection vectors")
            kd = collection_distill_loss(
                queries,
                targets.collection,
                targets.collection_rows,
                _mined_target(targets.collection_scores, losses.distill),
                *temperatures,
            )
        else:
            kd = soft_label_distill_loss(
                queries, candidates, _mined_target(targets.teacher_scores, losses.distill), *temperatures
            )
        total = total + losses.distill.weight * kd
        metrics["loss_distill"] = kd.item()
    if losses.embedding_distill.weight > 0 and full_size:
        teacher_queries, teacher_candidates = _teacher_embeddings(targets, "embedding_distill")
        student = torch.cat([queries, candidates.reshape(-1, candidates.shape[-1])])
        teacher = torch.cat([teacher_queries, teacher_candidates.reshape(-1, teacher_candidates.shape[-1])])
        hd = embedding_distill_loss(student, teacher)
        total = total + losses.embedding_distill.weight * hd
        metrics["loss_embedding_distill"] = hd.item()
    return total, metrics
