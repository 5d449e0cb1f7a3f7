"""Serve section: Ray Serve deployment, autoscaling, token-budget batching, keys and request limits."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import Section


class AutoscalingConfig(Section):
    min_replicas: int = Field(1, ge=0)
    max_replicas: PositiveInt = 2
    target_ongoing_requests: float = Field(4.0, gt=0)
    upscale_delay_s: float = Field(10.0, ge=0)
    downscale_delay_s: float = Field(60.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self


class BatchingConfig(Section):
    max_batch_tokens: PositiveInt = 8192
    max_batch_size: PositiveInt = 64
    batch_wait_timeout_s: float = Field(0.005, ge=0)


class LimitsConfig(Section):
    max_inputs: PositiveInt = 256
    max_chars_per_input: PositiveInt = 32768
    max_tokens_per_input: PositiveInt = 512
    on_too_long: Literal["truncate", "reject"] = "truncate"
    max_body_bytes: PositiveInt = 4 * 1024 * 1024


class ServeConfig(Section):
    name: str = "embedforge"
    model: str | None = None  # None: the pipeline's exported model
    model_name: str = "embedforge"
    host: str = "127.0.0.1"
    port: PositiveInt = 8000
    route_prefix: str = "/"
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    max_ongoing_requests: PositiveInt = 32
    max_queued_requests: int = Field(128, ge=-1)
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    api_keys_env: str | None = Field(None, description="name of an env var holding comma-separated API keys")
