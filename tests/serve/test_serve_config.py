"""The serve config section, the Serve config YAML, deployment options and the CLI's error paths (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from embedforge.cli.main import main
from embedforge.config import load_config
from embedforge.config.serve import ServeConfig
from embedforge.serve.deploy import app_builder, build_app, deployment_options, resolve_model

REPO = Path(__file__).resolve().parents[2]


def test_serve_config_rejects_inconsistent_values():
    with pytest.raises(ValidationError, match=r"max_batch_tokens \(100\) is below limits.max_tokens_per_input"):
        ServeConfig.model_validate({"batching": {"max_batch_tokens": 100}, "limits": {"max_tokens_per_input": 512}})
    with pytest.raises(ValidationError, match="route_prefix must start with '/'"):
        ServeConfig(route_prefix="v1")
    with pytest.raises(ValidationError, match=r"min_replicas \(3\) > max_replicas \(2\)"):
        ServeConfig.model_validate({"autoscaling": {"min_replicas": 3, "max_replicas": 2}})
    with pytest.raises(ValidationError, match="extra"):
        ServeConfig.model_validate({"limits": {"max_input": 3}})


@pytest.mark.parametrize("profile", ["tiny", "local", "nv-embed-v2"])
def test_profiles_give_valid_ray_deployment_options(profile):
    from ray.serve.config import AutoscalingConfig

    serve_config = load_config(REPO / "configs" / f"{profile}.yaml").serve
    options = deployment_options(serve_config)
    scaling = AutoscalingConfig(**options["autoscaling_config"])
    assert scaling.max_replicas == serve_config.autoscaling.max_replicas
    assert scaling.target_ongoing_requests == serve_config.autoscaling.target_ongoing_requests
    assert options["max_queued_requests"] == serve_config.max_queued_requests
    actor = options["ray_actor_options"]
    assert (actor["num_cpus"], actor["num_gpus"]) == (serve_config.num_cpus, serve_config.num_gpus)
    assert actor["runtime_env"] == {"env_vars": {"OMP_WAIT_POLICY": "PASSIVE"}}


def test_omp_wait_policy_can_be_left_to_openmp():
    assert "runtime_env" not in deployment_options(ServeConfig(omp_wait_policy=None))["ray_actor_options"]
    with pytest.raises(ValueError, match="omp_wait_policy"):
        ServeConfig(omp_wait_policy="SPIN")


def test_serve_config_yaml_is_valid_and_builds(monkeypatch):
    from ray.serve import Application
    from ray.serve.schema import ServeDeploySchema

    raw = yaml.safe_load((REPO / "configs" / "serve" / "local.yaml").read_text())
    schema = ServeDeploySchema.model_validate(raw)
    app = schema.applications[0]
    assert app.import_path == "embedforge.serve.deploy:app_builder"
    monkeypatch.chdir(REPO)
    assert isinstance(app_builder(app.args), Application)


def test_the_app_is_a_gateway_in_front_of_the_autoscaled_model_deployment():
    serve_config = ServeConfig(name="ef", gateway={"replicas": 2, "max_attempts": 5})
    app = build_app(serve_config, "bundled:all-minilm-l6-v2")
    gateway = app._bound_deployment
    assert gateway.name == "ef-gateway" and gateway.num_replicas == 2
    model = gateway.init_args[2]._bound_deployment  # the model deployment, bound as the gateway's handle
    assert model.name == "ef" and model.ray_actor_options["num_cpus"] == serve_config.num_cpus
    with pytest.raises(ValidationError, match="max_attempts"):
        ServeConfig(gateway={"max_attempts": 0})


def test_keys_env_must_exist(monkeypatch):
    monkeypatch.delenv("EF_MISSING_KEYS", raising=False)
    with pytest.raises(ValueError, match="EF_MISSING_KEYS"):
        build_app(ServeConfig(api_keys_env="EF_MISSING_KEYS"), "bundled:all-minilm-l6-v2")


def test_model_resolution_errors(tmp_path):
    with pytest.raises(ValueError, match="no model to serve"):
        resolve_model(ServeConfig(), None, None)
    with pytest.raises(ValueError, match=r"no trained model at .*train/model"):
        resolve_model(ServeConfig(), None, tmp_path)
    (tmp_path / "train" / "model").mkdir(parents=True)
    assert resolve_model(ServeConfig(), None, tmp_path) == str(tmp_path / "train" / "model")
    assert resolve_model(ServeConfig(model="bundled:tiny-llama"), None, None) == "bundled:tiny-llama"


def test_cli_reports_bad_targets(capsys, tmp_path):
    assert main(["serve", str(tmp_path / "nope")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "nope"), "--set", "serve.port=1"]) == 1
    assert "overrides need a config file" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "missing.yaml")]) == 1
    assert "no such config file" in capsys.readouterr().err
