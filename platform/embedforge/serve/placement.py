"""Whether a Serve application's first replicas fit the cluster, said before deploying instead of after minutes of
silent waiting: what the application asks for, what the cluster has and has free, and which setting changes it.

Ray Serve waits for a replica's resources for as long as it takes (an autoscaler may be adding a node). On a
cluster of a fixed size, this project's local head or a command's private cluster, an application that asks for
more than the cluster has can never start, so it fails at once. Elsewhere it may wait, up to
`serve.placement_timeout_s`.
"""

from __future__ import annotations

from collections.abc import Mapping

from embedforge.config.serve import ServeConfig


def app_demand(config: ServeConfig) -> dict[str, float]:
    """Ray resources of the application's first replicas (`max(min_replicas, 1)`) and its gateway replicas."""
    replicas = max(config.autoscaling.min_replicas, 1)
    demand = {
        "CPU": replicas * config.num_cpus + config.gateway.replicas * config.gateway.num_cpus,
        "GPU": replicas * config.num_gpus,
    }
    for name, amount in config.resources.items():
        demand[name] = replicas * amount
    return {name: amount for name, amount in demand.items() if amount > 0}


def placement_problem(
    config: ServeConfig, total: Mapping[str, float], free: Mapping[str, float]
) -> tuple[str, bool] | None:
    """None when the application fits what is free now; else the explanation and whether it exceeds even the
    cluster's total (then only a larger cluster or smaller settings help)."""
    demand = app_demand(config)
    short = [name for name, amount in demand.items() if amount > free.get(name, 0.0) + 1e-9]
    if not short:
        return None
    replicas = max(config.autoscaling.min_replicas, 1)
    parts = [
        f"{replicas} replica{'s' * (replicas > 1)} (serve.autoscaling.min_replicas) x {config.num_cpus:g} CPU "
        f"(serve.num_cpus)"
        + (f" and {config.num_gpus:g} GPU (serve.num_gpus)" if config.num_gpus else "")
        + f", plus the gateway's {config.gateway.replicas} x {config.gateway.num_cpus:g} CPU "
        "(serve.gateway.num_cpus)"
    ]
    asks = ", ".join(f"{demand[name]:g} {name}" for name in short)
    has = ", ".join(f"{total.get(name, 0.0):g} {name} ({free.get(name, 0.0):g} free)" for name in short)
    fix = {
        "CPU": f"--set serve.num_cpus={_fitting_cpus(config, total.get('CPU', 0.0)):g}",
        "GPU": "--set serve.num_gpus=0 to serve on CPUs",
    }
    hints = [fix.get(name, f"nodes with the resource {name} (serve.resources)") for name in short]
    fatal = any(demand[name] > total.get(name, 0.0) + 1e-9 for name in short)
    message = (
        f"the deployment '{config.name}' asks for {asks}: {parts[0]}; the cluster has {has}. "
        f"Fewer or smaller replicas fit: {'; '.join(hints)}, or lower serve.autoscaling.min_replicas"
    )
    return message, fatal


def _fitting_cpus(config: ServeConfig, total_cpus: float) -> float:
    """The largest CPUs per replica (in halves) that the first replicas and the gateway fit into."""
    replicas = max(config.autoscaling.min_replicas, 1)
    room = total_cpus - config.gateway.replicas * config.gateway.num_cpus
    return max(0.5 * int(2 * room / replicas), 0.1) if room > 0 else 0.1
