"""The one config object that drives every stage, with the checks that span sections."""

from __future__ import annotations

from pydantic import Field, model_validator

from embedforge.config.base import Section
from embedforge.config.data import DataConfig
from embedforge.config.evaluate import EvaluateConfig
from embedforge.config.mine import MineConfig
from embedforge.config.model import ModelConfig
from embedforge.config.resources import ResourcesConfig
from embedforge.config.serve import ServeConfig
from embedforge.config.synth import SynthConfig
from embedforge.config.train import TrainConfig


class EmbedforgeConfig(Section):
    name: str = "embedforge"
    seed: int = 0
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    synth: SynthConfig = Field(default_factory=SynthConfig)
    mine: MineConfig = Field(default_factory=MineConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig)

    @model_validator(mode="after")
    def _references_exist(self) -> EmbedforgeConfig:
        names = [s.name for s in self.data.sources]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"data.sources: duplicate source names {duplicates}")
        known = set(names)
        for i, stage in enumerate(self.train.stages):
            for j, ds in enumerate(stage.datasets):
                if ds.source not in known:
                    raise ValueError(
                        f"train.stages.{i}.datasets.{j}.source: unknown data source {ds.source!r} "
                        f"(known: {sorted(known)})"
                    )
        for source in self.data.sources:
            if source.kind == "cropped" and not source.path:
                if not self.mine.corpus:
                    raise ValueError(
                        f"data.sources {source.name!r}: a cropped source without a path cuts its queries from "
                        "mine.corpus, which is not set; give the source a path or set mine.corpus"
                    )
                source.path = self.mine.corpus
        for name in self.mine.sources:
            if name not in known:
                raise ValueError(f"mine.sources: unknown data source {name!r} (known: {sorted(known)})")
        over_collection = [s.name for s in self.train.stages if s.losses.distills_over_collection]
        if over_collection and not self.model.frozen_documents:
            raise ValueError(
                f"train.stages {over_collection}: distill.over: collection scores queries against the collection's "
                "fixed vectors, which needs model.frozen_documents: true"
            )
        if self.train.freeze_token_embeddings and self.model.lora.enabled:
            raise ValueError(
                "train.freeze_token_embeddings applies to full fine-tuning; with model.lora.enabled the token "
                "embeddings do not train anyway"
            )
        if self.model.frozen_documents and self.train.gradcache.enabled:
            raise ValueError(
                "train.gradcache with model.frozen_documents: frozen documents are fixed vectors that take no "
                "activations and no gradients; turn gradcache off"
            )
        if self.train.select_checkpoint and not (self.synth.enabled and self.synth.documents):
            raise ValueError(
                "train.select_checkpoint needs a validation slice: the queries synth holds out of synth.documents "
                "(set synth.documents and synth.enabled, or turn select_checkpoint off)"
            )
        return self

    @model_validator(mode="after")
    def _fits_declared_cluster(self) -> EmbedforgeConfig:
        cpus, gpus = self.resources.num_cpus, self.resources.num_gpus
        train = self.train
        if cpus is not None and train.num_workers * train.cpus_per_worker > cpus:
            raise ValueError(
                f"train.num_workers: {train.num_workers} workers x {train.cpus_per_worker} CPUs need "
                f"{train.num_workers * train.cpus_per_worker} CPUs, resources.num_cpus is {cpus}"
            )
        if gpus is not None and train.use_gpu and train.num_workers > gpus:
            raise ValueError(
                f"train.num_workers: {train.num_workers} GPU workers need {train.num_workers} GPUs, "
                f"resources.num_gpus is {gpus}"
            )
        if cpus is not None:
            for key, need in self._actor_cpus():
                if need > cpus:
                    raise ValueError(
                        f"{key}: one actor asks for {need} CPUs, resources.num_cpus is {cpus}: it would never be "
                        "scheduled"
                    )
        gen = self.synth.generator
        if gpus is not None and self.synth.enabled and gen.num_gpus_per_engine * gen.tensor_parallel_size > gpus:
            raise ValueError(
                f"synth.generator.tensor_parallel_size: {gen.tensor_parallel_size} needs "
                f"{gen.num_gpus_per_engine * gen.tensor_parallel_size} GPUs, resources.num_gpus is {gpus}"
            )
        if gpus is not None and self.serve.num_gpus * max(self.serve.autoscaling.min_replicas, 1) > gpus:
            raise ValueError(f"serve.num_gpus: {self.serve.num_gpus} per replica exceeds resources.num_gpus {gpus}")
        return self

    def _actor_cpus(self) -> list[tuple[str, float]]:
        """The CPUs one Ray actor of each enabled stage reserves, keyed by the config field that sets it (BM25
        scores in the driver, so its teacher has no actor)."""
        found = [("serve.num_cpus", self.serve.num_cpus)]
        if self.synth.enabled:
            found.append(("synth.generator.cpus_per_engine", self.synth.generator.cpus_per_engine))
        if self.mine.enabled:
            found += [
                (f"mine.teachers.{i}.num_cpus", t.num_cpus)
                for i, t in enumerate(self.mine.teachers)
                if t.kind != "bm25"
            ]
        if self.evaluate.enabled:
            found.append(("evaluate.cpus_per_worker", self.evaluate.cpus_per_worker))
        return found
