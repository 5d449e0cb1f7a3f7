"""Train section: Ray Train scaling, the two NV-Embed stages, losses, curriculum, GradCache, checkpoints.

NV-Embed (seed 000) 3.3 and appendix C; MGH (seed 002) 2.1 / 4.1; pair BCE (seed 004); LGAI (seed 003) 4.1-4.2.
"""

from __future__ import annotations

import itertools
import re
from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from embedforge.config.base import CustomResources, Section, resources_field


class InfoNCEConfig(Section):
    weight: float = Field(1.0, ge=0)
    temperature: float = Field(0.02, gt=0)
    symmetric: bool = Field(
        False,
        description="also score each positive against every query of the global batch and average the two "
        "directions' cross-entropies (CLIP's symmetric loss; GTE's improved contrastive loss adds the same "
        "direction): needs the stage's in-batch negatives",
    )

    implicit_values: ClassVar[dict[str, Any]] = {"symmetric": False}


class PairBCEConfig(Section):
    """Paper 004 eqs. 2-5. `beta: null` derives the bias from the batch's label prior."""

    weight: float = Field(0.0, ge=0)
    alpha: float = Field(20.0, gt=0)
    beta: float | None = None
    graded_floor: float = Field(0.7, ge=0, le=1, description="c in z = c + (1 - c) * r / R")


class DistillConfig(Section):
    """LGAI 4.1 soft labels: KL to a teacher's score distribution over each query's candidates.

    `scores: mined` takes the scores mining stored with each example (its positive and hard negatives);
    `scores: teacher` has the frozen `train.teacher` score every query against every candidate of the global batch
    (any teacher width: only its scores are matched). `over: collection` keeps the mined scores as the target and
    spreads the student's distribution over every document of the collection (`model.frozen_documents`: their
    vectors are fixed). The teacher temperature is in the mined scores' unit: RRF-fused scores of n teachers lie in
    (0, n / (rrf_k + 1)], so with two teachers 0.001 puts about half the mass on the top candidate and nearly all
    on the top five. `positive: top` raises the positive's mined score to its list's highest: the document a
    generated query was written from is relevant by construction (GPL's positive), so the target never ranks it
    below another candidate, where the teachers alone may."""

    weight: float = Field(0.0, ge=0)
    scores: Literal["mined", "teacher"] = "mined"
    over: Literal["candidates", "collection"] = "candidates"
    positive: Literal["as_scored", "top"] = "as_scored"
    teacher_temperature: float = Field(0.05, gt=0)
    student_temperature: float = Field(0.05, gt=0)

    implicit_values: ClassVar[dict[str, Any]] = {"scores": "mined", "over": "candidates", "positive": "as_scored"}

    @model_validator(mode="after")
    def _mined_options_need_mined_scores(self) -> DistillConfig:
        if self.over == "collection" and self.scores != "mined":
            raise ValueError("distill.over: collection distils the mined scores; set distill.scores: mined")
        if self.positive == "top" and self.scores != "mined":
            raise ValueError("distill.positive: top raises the positive's mined score; set distill.scores: mined")
        return self


class EmbeddingDistillConfig(Section):
    """MSE between the student's and the frozen `train.teacher`'s final (pooled) embeddings of the same inputs.

    NV-Embed A.2 distils hidden states; this applies the same L = L_contrastive + a * MSE to the embeddings a user
    serves, which needs no layer mapping: a smaller student learns the teacher's space, or, with the starting model
    as teacher, fine-tuning stays anchored to what the model already knew. Over unit vectors the MSE, averaged over
    the d dimensions, is (2 - 2 cos) / d: with SmolLM2's 576 dimensions a weight of 500 makes it about 0.2 beside
    InfoNCE's 0.1-2 (docs/quality.md)."""

    weight: float = Field(0.0, ge=0)


class LossesConfig(Section):
    infonce: InfoNCEConfig = Field(default_factory=InfoNCEConfig)
    pair_bce: PairBCEConfig = Field(default_factory=PairBCEConfig)
    distill: DistillConfig = Field(default_factory=DistillConfig)
    embedding_distill: EmbeddingDistillConfig = Field(default_factory=EmbeddingDistillConfig)

    @property
    def uses_teacher(self) -> bool:
        """Whether a step needs the frozen `train.teacher`'s embeddings of the batch."""
        return self.embedding_distill.weight > 0 or (self.distill.weight > 0 and self.distill.scores == "teacher")

    @property
    def distills_over_collection(self) -> bool:
        """Whether a step scores its queries against the whole collection (`distill.over: collection`)."""
        return self.distill.weight > 0 and self.distill.over == "collection"

    @model_validator(mode="after")
    def _some_loss(self) -> LossesConfig:
        if not any(t.weight > 0 for t in (self.infonce, self.pair_bce, self.distill, self.embedding_distill)):
            raise ValueError(
                "losses: every loss weight is 0; give infonce, pair_bce, distill or embedding_distill a positive weight"
            )
        return self


class StageDataset(Section):
    source: str
    weight: float = Field(1.0, gt=0, description="the chance of a step drawing its batch from this source, relative")
    max_epochs: float | None = Field(
        None,
        gt=0,
        description="once the stage has drawn this many times the source's examples, later steps draw from the other "
        "sources: a few examples (a small synthetic run, say) then train a few times each instead of once every "
        "couple of steps; unset, the weight alone decides",
    )


class StageConfig(Section):
    name: str
    datasets: list[StageDataset] = Field(min_length=1)
    in_batch_negatives: bool = True
    steps: PositiveInt = 100
    learning_rate: float = Field(2e-5, gt=0)
    warmup_steps: int = Field(50, ge=0)
    batch_size: PositiveInt = Field(32, description="examples per worker and step (the per-worker batch)")
    global_batch_size: PositiveInt | None = Field(
        None,
        description="examples per step over all workers (NV-Embed 4.2 gives 128 per stage); when set, it decides "
        "batch_size (global / train.num_workers, which must divide it evenly)",
    )
    num_negatives: int = Field(7, ge=0)
    curriculum: str = "none"
    losses: LossesConfig = Field(default_factory=LossesConfig)

    @model_validator(mode="after")
    def _symmetric_needs_in_batch(self) -> StageConfig:
        if self.losses.infonce.symmetric and not self.in_batch_negatives:
            raise ValueError(
                f"stage {self.name!r}: infonce.symmetric scores each positive against the batch's other queries; "
                "set in_batch_negatives: true or symmetric: false"
            )
        return self

    @field_validator("curriculum")
    @classmethod
    def _known_curriculum(cls, value: str) -> str:
        if value in {"none", "mgh", "reverse", "random"} or re.fullmatch(r"fixed:[1-4]", value):
            return value
        raise ValueError(f"unknown curriculum {value!r}: use none, mgh, reverse, random or fixed:1..4")


class GradCacheConfig(Section):
    """Gradient caching (Gao et al. 2021): the step's texts go through the model in chunks, longest first."""

    enabled: bool = False
    chunk_size: PositiveInt = Field(8, description="texts per chunk, at most")
    chunk_tokens: PositiveInt | None = Field(
        None,
        description="padded tokens per chunk, at most (texts x the chunk's longest; a longer text goes alone): "
        "chunks of short texts hold more of them at the same activation memory; None: chunk_size alone decides",
    )

    implicit_values: ClassVar[dict[str, Any]] = {"chunk_tokens": None}


class InContextConfig(Section):
    """LGAI 4.2: a fraction of training queries get k demonstrations from the same task."""

    fraction: float = Field(0.0, ge=0, le=1)
    k: int = Field(1, ge=0)


class MatryoshkaConfig(Section):
    """Matryoshka Representation Learning (Kusupati et al., NeurIPS 2022, eq. 1): every loss of every stage is also
    computed on the first d coordinates of each embedding, renormalised, for each d in `dims`, and added with
    `weight`; the full embedding keeps weight 1. The paper's networks, trained whole this way, lose little when
    their vectors are cut to those sizes (the API's `dimensions`); LoRA over the generalist profile's 120 steps
    does not change what a cut costs (docs/quality.md, "Serving fewer dimensions"). Embedding distillation, which
    matches a teacher's full vectors, runs at full size only."""

    dims: list[PositiveInt] = Field(
        default_factory=list,
        description="truncated sizes trained besides the full one, increasing, e.g. [64, 128, 256]",
    )
    weight: float = Field(1.0, gt=0, description="each truncated size's share of the loss, the full size's being 1")

    @field_validator("dims")
    @classmethod
    def _increasing(cls, dims: list[int]) -> list[int]:
        if any(b <= a for a, b in itertools.pairwise(dims)):
            raise ValueError("matryoshka dims must increase strictly")
        return dims


class TrainConfig(Section):
    enabled: bool = True
    num_workers: PositiveInt = 1
    cpus_per_worker: float = Field(1.0, gt=0)
    use_gpu: bool = False
    resources: CustomResources = resources_field("the training workers")
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    mixed_precision: Literal["auto", "no", "bf16"] = "auto"
    stages: list[StageConfig] = Field(default_factory=list)
    gradcache: GradCacheConfig = Field(default_factory=GradCacheConfig)
    micro_batch_size: PositiveInt | None = Field(
        None,
        description="forward each side of a batch in length-sorted chunks of this many texts, one autograd graph: "
        "same loss and gradients, faster on CPUs (git log); None: one forward pass per side",
    )
    in_context: InContextConfig = Field(default_factory=InContextConfig)
    matryoshka: MatryoshkaConfig = Field(default_factory=MatryoshkaConfig)
    max_grad_norm: float = Field(1.0, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    freeze_token_embeddings: bool = Field(
        False,
        description="full fine-tuning (model.lora.enabled: false) leaves the token embedding matrix as it is: in a "
        "multilingual encoder it is most of the weights (multilingual-e5-small: 96M of 118M), a step only moves the "
        "rows of its own tokens, and without it a step and a checkpoint cost a fraction",
    )
    checkpoint_every: PositiveInt = 50
    select_checkpoint: bool = Field(
        False,
        description="keep every checkpoint and make the one scoring best on the validation slice (synthetic_heldout: "
        "the synthetic queries held out of training) the trained model; needs synth.documents",
    )
    wise_ft_alpha: float = Field(
        1.0,
        gt=0,
        le=1,
        description="WiSE-FT (Wortsman et al. 2022, eq. 1): the trained model is saved as (1 - alpha) x the starting "
        "weights + alpha x the trained ones (with LoRA: every adapter update times alpha); 1 keeps the trained "
        "weights. Lower values trade some gain on data like the training sets for robustness on other data",
    )
    max_failures: int = Field(2, ge=0)
    log_every: PositiveInt = 10
    seed: int = 0
    teacher: str | None = Field(
        None,
        description="frozen teacher model for embedding_distill (NV-Embed A.2; the starting model anchors "
        "fine-tuning) and for distill with scores: teacher (LGAI 4.1 soft labels over the whole batch)",
    )

    implicit_values: ClassVar[dict[str, Any]] = {
        "wise_ft_alpha": 1,
        "freeze_token_embeddings": False,
        "matryoshka": MatryoshkaConfig(),
    }

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        names = [s.name for s in self.stages]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"train.stages: duplicate stage names {duplicates}")
        if self.backend == "nccl" and not self.use_gpu:
            raise ValueError("train.backend: nccl needs GPU workers (train.use_gpu: true); use gloo or auto on CPU")
        for stage in self.stages:
            self._resolve_batch(stage)
        wants_teacher = [s.name for s in self.stages if s.losses.uses_teacher]
        if wants_teacher and self.teacher is None:
            raise ValueError(
                f"train.teacher: stages {wants_teacher} use embedding_distill or distill with scores: teacher, but no "
                "teacher is set"
            )
        return self

    def _resolve_batch(self, stage: StageConfig) -> None:
        """A stage's global_batch_size, when given, sets its per-worker batch_size = global / num_workers (so a config
        re-validated for another worker count keeps its global batch)."""
        if stage.global_batch_size is None:
            return
        per_worker, rest = divmod(stage.global_batch_size, self.num_workers)
        if rest or per_worker == 0:
            raise ValueError(
                f"train.stages[{stage.name}]: global_batch_size {stage.global_batch_size} does not divide evenly "
                f"over train.num_workers={self.num_workers}"
            )
        stage.batch_size = per_worker

    def global_batch(self, stage: StageConfig) -> int:
        """Examples per step over all workers."""
        return stage.batch_size * self.num_workers
