"""What a Serve application asks of the cluster, said before deploying (`serve/placement.py`)."""

from __future__ import annotations

from embedforge.config.serve import ServeConfig
from embedforge.serve.placement import app_demand, placement_problem


def config(**values) -> ServeConfig:
    return ServeConfig.model_validate(values)


def test_the_first_replicas_and_the_gateway_are_counted():
    two = config(num_cpus=1.0, num_gpus=1.0, autoscaling={"min_replicas": 2, "max_replicas": 4}, resources={"a": 0.5})
    assert app_demand(two) == {"CPU": 2.1, "GPU": 2.0, "a": 1.0}
    assert app_demand(config(autoscaling={"min_replicas": 0, "max_replicas": 2})) == {"CPU": 1.1}  # one to start


def test_two_replicas_on_a_two_cpu_head_can_never_fit_and_the_message_says_what_would():
    two = config(autoscaling={"min_replicas": 2, "max_replicas": 2})
    message, exceeds_cluster = placement_problem(two, {"CPU": 2.0}, {"CPU": 2.0})
    assert exceeds_cluster
    assert "asks for 2.1 CPU" in message and "2 replicas (serve.autoscaling.min_replicas) x 1 CPU" in message
    assert "the cluster has 2 CPU (2 free)" in message and "--set serve.num_cpus=0.5" in message


def test_what_is_busy_now_is_not_what_cannot_fit():
    one = config()
    assert placement_problem(one, {"CPU": 8.0}, {"CPU": 4.0}) is None
    message, exceeds_cluster = placement_problem(one, {"CPU": 8.0}, {"CPU": 0.5})
    assert not exceeds_cluster and "8 CPU (0.5 free)" in message
    gpu = config(num_gpus=1.0)
    message, exceeds_cluster = placement_problem(gpu, {"CPU": 8.0}, {"CPU": 8.0})
    assert exceeds_cluster and "1 GPU" in message and "serve.num_gpus=0" in message
