"""Build the Ray Serve application from the config and start it; `app_builder` is the `serve run/deploy` hook.

The application is two deployments: the HTTP gateway (`serve.gateway`: keys, body limits, retries on another
replica when one dies) and the model deployment named `serve.name`. Its options come from `serve:` in the config:
replica resources, `max_ongoing_requests` and `max_queued_requests` (backpressure: a 503 with Retry-After once the
queue is full instead of hanging), and the autoscaling policy (min/max replicas, target ongoing requests per
replica, upscale/downscale delays).

Throughput: Ray Serve's documented throughput mode is a cluster environment setting, not a deployment option.
Export `RAY_SERVE_THROUGHPUT_OPTIMIZED=1 RAY_SERVE_ENABLE_DIRECT_INGRESS=0` where Ray starts (before `ray start`,
in the RayService pods' env) to keep the HTTP proxy but run user code and the router on the main event loop;
benchmarks/serve.py measures it. Replicas get `OMP_WAIT_POLICY` (`serve.omp_wait_policy`) in their runtime env, as
OpenMP reads it once, when torch loads.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from ray import serve
from ray.serve import Application

from embedforge.config import EmbedforgeConfig, load_config
from embedforge.config.model import ModelConfig
from embedforge.config.serve import ServeConfig
from embedforge.runs.store import RunStore, is_remote
from embedforge.serve.app import EmbeddingDeployment
from embedforge.serve.auth import digests_from_env, digests_from_file
from embedforge.serve.gateway import GATEWAY_MAX_ONGOING_REQUESTS, EmbeddingGateway

log = logging.getLogger(__name__)


def serve_section(config: EmbedforgeConfig | ServeConfig) -> ServeConfig:
    """Serving needs only the `serve:` section; callers may pass the whole config or the section."""
    return config.serve if isinstance(config, EmbedforgeConfig) else config


def resolve_model(config: EmbedforgeConfig | ServeConfig, model: str | None, run_dir: str | Path | None) -> str:
    """The model to serve: the argument, else `serve.model`, else the trained model under `run_dir`. A model in
    object storage stays a URI: each replica copies it to its own node."""
    ref = model or serve_section(config).model
    if ref is None:
        if run_dir is None:
            raise ValueError("no model to serve: pass a model, set serve.model, or give the run directory")
        if is_remote(run_dir):
            ref = RunStore(str(run_dir)).child("train/model")
            if not RunStore(ref).files():
                raise ValueError(f"no trained model at {ref}: run `embedforge train` first or pass a model")
        else:
            trained = Path(run_dir) / "train" / "model"
            if not trained.is_dir():
                raise ValueError(f"no trained model at {trained}: run `embedforge train` first or pass a model")
            ref = str(trained)
    if ref.startswith(("bundled:", "http://", "https://")) or is_remote(ref):
        return ref
    path = Path(ref).expanduser().resolve()
    if not path.exists():
        raise ValueError(f"model path {path} does not exist")
    return str(path)


def logging_config(serve_config: ServeConfig) -> dict[str, Any]:
    return {"enable_access_log": serve_config.access_log, "log_level": "INFO" if serve_config.access_log else "WARNING"}


def actor_options(serve_config: ServeConfig) -> dict[str, Any]:
    """Replica resources (custom ones pin replicas to nodes), and the OpenMP wait policy in the replica's
    environment (read when torch loads)."""
    options: dict[str, Any] = {"num_cpus": serve_config.num_cpus, "num_gpus": serve_config.num_gpus}
    if serve_config.resources:
        options["resources"] = serve_config.resources
    if serve_config.omp_wait_policy is not None:
        options["runtime_env"] = {"env_vars": {"OMP_WAIT_POLICY": serve_config.omp_wait_policy}}
    return options


def deployment_options(serve_config: ServeConfig) -> dict[str, Any]:
    scaling = serve_config.autoscaling
    return {
        "name": serve_config.name,
        "logging_config": logging_config(serve_config),
        "ray_actor_options": actor_options(serve_config),
        "max_ongoing_requests": serve_config.max_ongoing_requests,
        "max_queued_requests": serve_config.max_queued_requests,
        "autoscaling_config": {
            "min_replicas": scaling.min_replicas,
            "initial_replicas": max(scaling.min_replicas, 1),
            "max_replicas": scaling.max_replicas,
            "target_ongoing_requests": scaling.target_ongoing_requests,
            "upscale_delay_s": scaling.upscale_delay_s,
            "downscale_delay_s": scaling.downscale_delay_s,
            "metrics_interval_s": scaling.metrics_interval_s,
            "look_back_period_s": scaling.look_back_period_s,
        },
    }


def gateway_options(serve_config: ServeConfig) -> dict[str, Any]:
    return {
        "name": f"{serve_config.name}-gateway",
        "logging_config": logging_config(serve_config),
        "num_replicas": serve_config.gateway.replicas,
        "ray_actor_options": {"num_cpus": serve_config.gateway.num_cpus},
        "max_ongoing_requests": GATEWAY_MAX_ONGOING_REQUESTS,
    }


def build_app(
    config: EmbedforgeConfig | ServeConfig, model: str, model_config: ModelConfig | None = None
) -> Application:
    """The bound application: the HTTP gateway in front of the autoscaled model deployment. Keys from the
    environment are read here (driver side) and only their digests reach the gateway; a key file is checked here
    and read by the gateway itself, again and again, so that it can rotate. `model_config`: the settings a plain
    backbone is loaded with (default: its own)."""
    serve_config = serve_section(config)
    digests = digests_from_env(serve_config.api_keys_env)
    if serve_config.api_keys_file is not None:
        digests_from_file(serve_config.api_keys_file)  # fails here, before any replica starts, when unreadable
    replicas = EmbeddingDeployment.options(**deployment_options(serve_config)).bind(
        serve_config, model, None if model_config is None else model_config.model_dump(mode="json")
    )
    return EmbeddingGateway.options(**gateway_options(serve_config)).bind(serve_config, digests, replicas)


def app_builder(args: dict[str, Any]) -> Application:
    """Entry for a Serve config file: `import_path: embedforge.serve.deploy:app_builder` with args
    `config` (YAML path), optional `model`, `run_dir` and `set` (list of KEY=VALUE overrides)."""
    if "config" not in args:
        raise ValueError("Serve config args need `config`: the embedforge config YAML path")
    config = load_config(args["config"], list(args.get("set", [])))
    run_dir = args.get("run_dir") or None
    return build_app(config, resolve_model(config, args.get("model"), run_dir))


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _proxy_address(host: str, port: int) -> tuple[str, int]:
    """Where Serve's proxy listens: ours if we started it, the running instance's otherwise."""
    from ray.serve.context import _get_global_client  # private, but the only way to read a running proxy's port

    http = _get_global_client().http_config
    return (host if http.host in ("0.0.0.0", "::") else http.host), int(http.port)


def wait_ready(url: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/ready", timeout=10) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            last = f"HTTP {err.code}"
        except OSError as err:
            last = str(err)
        time.sleep(0.5)
    raise TimeoutError(f"{url}/ready did not answer 200 within {timeout_s:.0f}s (last: {last})")


def deploy(
    config: EmbedforgeConfig | ServeConfig,
    model: str | None = None,
    *,
    run_dir: str | Path | None = None,
    port: int | None = None,
    wait_ready_s: float = 300.0,
    model_config: ModelConfig | None = None,
) -> str:
    """Start (or update) the application on the current Ray cluster and return its base URL once ready.
    `model_config`: the settings a plain backbone is loaded with (default: its own). An application the cluster
    cannot place fails at once on a cluster of a fixed size, and after `serve.placement_timeout_s` elsewhere
    (`serve/placement.py`), naming what it asked for and the setting that changes it."""
    from embedforge.cluster.local import connect

    serve_config = serve_section(config)
    ref = resolve_model(serve_config, model, run_dir)
    connect()
    wanted = serve_config.port if port is None else port
    if wanted == 0:
        wanted = free_port(serve_config.host)
    serve.start(
        http_options={
            "host": serve_config.host,
            "port": wanted,
            "request_timeout_s": serve_config.limits.request_timeout_s,
        },
        logging_config=logging_config(serve_config),
    )
    problem = _placement(serve_config)
    if problem is not None:
        wait_ready_s = min(wait_ready_s, serve_config.placement_timeout_s)
        log.warning("%s; waiting up to %.0f s for them (serve.placement_timeout_s)", problem, wait_ready_s)
    host, actual = _proxy_address(serve_config.host, wanted)
    if actual != wanted:
        log.warning(
            "Serve already listens on port %d on this cluster; port %d is ignored (`serve shutdown` frees it)",
            actual,
            wanted,
        )
    log.info("deploying %s as %r (%s)", ref, serve_config.name, serve_config.model_name)
    app = build_app(config, ref, model_config)
    serve.run(app, name=serve_config.name, route_prefix=serve_config.route_prefix, blocking=False)
    url = f"http://{host}:{actual}{serve_config.route_prefix.rstrip('/')}"
    try:
        info = wait_ready(url, wait_ready_s)
    except TimeoutError as err:
        if problem is None:
            raise
        raise TimeoutError(f"{problem}; not placed within {wait_ready_s:.0f} s (serve.placement_timeout_s)") from err
    log.info("serving %s at %s/v1/embeddings (dimension %s)", serve_config.model_name, url, info.get("dimension"))
    return url


def _placement(serve_config: ServeConfig) -> str | None:
    """Why the application may not be placed now (None when it fits what is free); raises when it never can on a
    cluster that cannot grow. An application already deployed under the name holds its own resources, so it is
    checked against the cluster's total only."""
    import ray

    from embedforge.cluster.local import fixed_size_cluster
    from embedforge.serve.placement import placement_problem

    total = {k: float(v) for k, v in ray.cluster_resources().items()}
    deployed = serve_config.name in serve.status().applications
    free = total if deployed else {k: float(v) for k, v in ray.available_resources().items()}
    found = placement_problem(serve_config, total, free)
    if found is None:
        return None
    message, exceeds_cluster = found
    if exceeds_cluster and fixed_size_cluster():
        raise ValueError(f"{message}; this cluster cannot grow")
    return message


def load_config_for(target: str, overrides: list[str] | None = None) -> EmbedforgeConfig | ServeConfig:
    """`embedforge serve` takes a config YAML or a model directory (served with default serve settings)."""
    if target.endswith((".yaml", ".yml")):
        return load_config(target, overrides)
    if overrides:
        raise ValueError(f"--set {overrides[0]}: overrides need a config file, not a model directory")
    return ServeConfig(model=target)
