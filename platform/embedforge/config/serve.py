"""Serve section: Ray Serve deployment, autoscaling, token-budget batching, keys and request limits.

Serving the trained embedder behind an OpenAI-style `/v1/embeddings` endpoint is the recipe's section 8; query
instructions follow NV-Embed (seed 000) section 4 through `model.instructions`, so serving and training agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from embedforge.config.base import CustomResources, Section, resources_field


class AutoscalingConfig(Section):
    """Ray Serve autoscaling: replicas follow ongoing requests per replica, with delays against flapping."""

    min_replicas: int = Field(1, ge=0)
    max_replicas: PositiveInt = 2
    target_ongoing_requests: float = Field(4.0, gt=0)
    upscale_delay_s: float = Field(10.0, ge=0)
    downscale_delay_s: float = Field(60.0, ge=0)
    metrics_interval_s: float = Field(10.0, gt=0, description="how often replicas report their load")
    look_back_period_s: float = Field(30.0, gt=0, description="window the load is averaged over")

    @model_validator(mode="after")
    def _ordered(self) -> AutoscalingConfig:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})")
        return self


class BatchingConfig(Section):
    """Dynamic batching across requests. A batch costs (texts x longest text) tokens, padding included."""

    max_batch_tokens: PositiveInt = 8192
    max_batch_size: PositiveInt = 64
    micro_batch_size: PositiveInt = Field(
        16,
        description="texts per forward pass inside a batch, sorted by length: on CPU 16 encodes MiniLM 1.4x faster "
        "than 64 (less padding, cache-friendly); raise it on GPUs",
    )
    batch_wait_timeout_s: float = Field(0.005, ge=0, le=1.0)
    max_pending_requests: PositiveInt = Field(1024, description="requests waiting for a batch before 503")


class LimitsConfig(Section):
    max_inputs: PositiveInt = 256
    max_chars_per_input: PositiveInt = 32768
    max_tokens_per_input: PositiveInt = 512
    on_too_long: Literal["truncate", "reject"] = Field(
        "reject",
        description="what a request that does not say (its `truncate` field, TEI's convention) gets for an input over "
        "max_tokens_per_input or max_chars_per_input: a 413 naming it, or its first tokens embedded",
    )
    max_body_bytes: PositiveInt = 4 * 1024 * 1024
    request_timeout_s: float = Field(60.0, gt=0, description="the proxy answers 408 past this, never hangs")


class GatewayConfig(Section):
    """The HTTP front of the application: it checks keys and body size, forwards each request to a model replica
    and, when that replica dies with the request in flight, sends it again to another (an embedding request is
    idempotent), so a client sees no error while a replica remains; with none answering, a 503 with Retry-After."""

    replicas: PositiveInt = 1
    num_cpus: float = Field(0.1, ge=0)
    max_attempts: PositiveInt = Field(4, description="tries of one request on model replicas (1: no retry)")
    backoff_s: float = Field(0.2, ge=0, description="wait before the second try, doubled before each further one")
    retry_after_s: PositiveInt = Field(5, description="Retry-After of a 503 when no model replica answers")


class ServeConfig(Section):
    name: str = "embedforge"
    model: str | None = None  # None: the pipeline's trained model, run_dir/train/model
    model_name: str = "embedforge"
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535, description="0 picks a free port")
    route_prefix: str = "/"
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    resources: CustomResources = resources_field("the model replicas")
    torch_threads: PositiveInt | None = Field(None, description="torch threads per replica; None: num_cpus")
    omp_wait_policy: Literal["PASSIVE", "ACTIVE"] | None = Field(
        "PASSIVE",
        description="OMP_WAIT_POLICY in replicas: PASSIVE torch threads sleep between forward passes instead of "
        "spinning on cores the HTTP proxy and the replica's event loop need (on 2 cores: 24.3 against 20.5 "
        "requests/s in one pair of runs, not repeated cleanly; git log); None: OpenMP's default",
    )
    max_ongoing_requests: PositiveInt = 32
    max_queued_requests: int = Field(128, ge=-1)
    default_input_type: Literal["query", "document"] = "document"
    access_log: bool = Field(True, description="Serve's per-request access log lines (proxy and replicas)")
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)
    batching: BatchingConfig = Field(default_factory=BatchingConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    api_keys_env: str | None = Field(None, description="name of an env var holding comma-separated API keys")
    api_keys_file: str | None = Field(
        None,
        description="a file of API keys (one per line or comma-separated, e.g. a mounted Kubernetes Secret) that the "
        "gateway reads again every api_keys_reload_s seconds: keys rotate without a restart",
    )
    api_keys_reload_s: float = Field(10.0, gt=0)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    placement_timeout_s: float = Field(
        120.0,
        gt=0,
        description="how long a deployment whose resources the cluster does not have free waits for them (an "
        "autoscaler adding a node) before it fails; on a cluster of a fixed size one that can never fit fails at once",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ServeConfig:
        if not self.route_prefix.startswith("/"):
            raise ValueError(f"route_prefix must start with '/', got {self.route_prefix!r}")
        if not self.model_name.strip():
            raise ValueError("model_name must not be empty: clients send it as `model`")
        if self.batching.max_batch_tokens < self.limits.max_tokens_per_input:
            raise ValueError(
                f"batching.max_batch_tokens ({self.batching.max_batch_tokens}) is below "
                f"limits.max_tokens_per_input ({self.limits.max_tokens_per_input}): one input would not fit"
            )
        return self
