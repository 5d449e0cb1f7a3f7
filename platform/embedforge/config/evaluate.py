"""Evaluate section: which tasks, which models, and the report (NV-Embed 5 / Table 13; LGAI 5.1 Borda)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import CustomResources, Section, resources_field

Family = Literal["retrieval", "reranking", "sts", "pair_classification", "classification", "clustering"]
TRAINED = "trained"  # the name the run's own trained model goes by in tasks, reports and baseline_for_deltas
HELDOUT_TASK = "synthetic_heldout"  # the validation slice: the generated queries synth held out of training


class CustomTask(Section):
    """A user's own task. `path` by family: retrieval a BEIR folder (qrels/<split>.tsv); reranking a JSONL of
    {query, positives, negatives}; sts / pair_classification a scored-pairs file (.jsonl or .tsv); classification
    and clustering a labelled-texts file (.jsonl or .tsv). Classification without `test_path` is split seeded."""

    name: str = Field(min_length=1)
    family: Family
    path: str
    instruction: str | None = None
    split: str = "test"
    test_path: str | None = None
    samples_per_label: PositiveInt = Field(
        8, description="classification: texts per label in each experiment's training draw (MTEB's default 8)"
    )

    @model_validator(mode="after")
    def _classification_fields_only_for_classification(self) -> CustomTask:
        if self.family == "classification":
            return self
        if self.test_path is not None:
            raise ValueError(f"custom task {self.name!r}: test_path only applies to classification tasks")
        if self.samples_per_label != CustomTask.model_fields["samples_per_label"].default:
            raise ValueError(f"custom task {self.name!r}: samples_per_label only applies to classification tasks")
        return self


class DeployGuard(Section):
    """What the deploy step judges a trained model on before serving it (pipeline/deploy_guard.py): the starting
    model is served instead unless the trained one beats it on `task` by `min_gain`."""

    task: str = Field(
        HELDOUT_TASK,
        description="an evaluated task: the validation slice (generated queries held out of training), or a custom "
        "retrieval task holding a few of the user's own queries with their judged documents",
    )
    min_gain: float = Field(
        0.0,
        ge=0,
        description="the trained model's main score must beat the starting model's by at least this much (0.005: "
        "half a point of nDCG@10 x 100)",
    )


class EvaluateConfig(Section):
    enabled: bool = True
    tasks: list[str] = Field(default_factory=lambda: ["all"], description="task names, or 'all'")
    custom_tasks: list[CustomTask] = Field(default_factory=list)
    instructions: dict[str, str] = Field(default_factory=dict, description="task name -> instruction override")
    demonstrations: dict[str, list[tuple[str, str]]] = Field(
        default_factory=dict,
        description="task name -> in-context (query, positive) pairs placed before each query's instruction (LGAI "
        "4.2), for a model trained with train.in_context; models without an instruction template ignore them",
    )
    baselines: list[str] = Field(default_factory=list, description="model references evaluated beside the trained one")
    baseline_for_deltas: str | None = Field(None, description="a baselines entry, or 'trained'")
    max_examples_per_task: PositiveInt | None = 1000
    max_queries_per_task: PositiveInt | None = Field(
        None, description="retrieval / reranking: at most this many queries; None: max_examples_per_task"
    )
    max_corpus_documents: PositiveInt | None = Field(
        None,
        description="retrieval: keep the judged documents of the kept queries plus a seeded sample of the "
        "rest up to this many; None keeps the whole corpus",
    )
    test_fraction: float = Field(0.2, gt=0, lt=1, description="test share of one-file classification sets")
    classification_experiments: PositiveInt = Field(
        10,
        description="classification: classifiers fit on independent label-balanced draws of the train split, "
        "accuracies averaged (MTEB's protocol: 10)",
    )
    contamination: Literal["drop", "mark"] = Field(
        "drop",
        description="scored units the run trained on (evaluate/contamination.py): drop them before scoring, or keep "
        "them and label the task contaminated",
    )
    seed: int = 0
    batch_size: PositiveInt = 32
    concurrency: PositiveInt = Field(
        1, description="Ray workers scoring tasks at once, each holding a copy of the model it scores"
    )
    cpus_per_worker: float = Field(1.0, gt=0)
    gpus_per_worker: float = Field(0.0, ge=0, description="GPUs each worker reserves; it encodes on them when > 0")
    resources: CustomResources = resources_field("the evaluation workers")
    cache: bool = Field(True, description="cache embeddings by (model, instruction, text) hash")
    cache_dir: str | None = Field(None, description="default <EMBEDFORGE_CACHE>/embeddings")
    dimensions: list[PositiveInt] = Field(
        default_factory=list,
        description="also score every model with its vectors cut to each of these sizes and renormalised, as a "
        "request's `dimensions` is served, reported as MODEL@SIZE (train.matryoshka trains for it); each size must "
        "be below every evaluated model's width",
    )

    deploy_guard: DeployGuard = Field(default_factory=DeployGuard)

    implicit_values: ClassVar[dict[str, Any]] = {"dimensions": [], "deploy_guard": DeployGuard()}

    @model_validator(mode="after")
    def _consistent(self) -> EvaluateConfig:
        if not self.tasks:
            raise ValueError("evaluate.tasks is empty: name tasks or use ['all']")
        names = [t.name for t in self.custom_tasks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"custom_tasks: duplicate task names {duplicates}")
        self._guard_task_evaluated()
        known = {*self.baselines, TRAINED}
        if self.baseline_for_deltas is not None and self.baseline_for_deltas not in known:
            raise ValueError(
                f"baseline_for_deltas {self.baseline_for_deltas!r} is neither 'trained' nor one of the baselines "
                f"{self.baselines}"
            )
        return self

    def _guard_task_evaluated(self) -> None:
        """A guard task the user names is one evaluation scores (the default, the validation slice, is scored
        whenever the run has one; under `tasks: [all]` evaluation checks the name against every task it knows)."""
        guard = self.deploy_guard.task
        if "task" not in self.deploy_guard.model_fields_set or guard == HELDOUT_TASK or "all" in self.tasks:
            return
        if guard not in self.tasks:
            raise ValueError(
                f"evaluate.deploy_guard.task {guard!r} is not evaluated: add it to evaluate.tasks {self.tasks} "
                "(a custom task also to evaluate.custom_tasks)"
            )
