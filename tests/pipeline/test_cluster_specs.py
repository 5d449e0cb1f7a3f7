"""The cluster specs in cluster/: they parse, name real entry points and configs, and hold the production
profile's resources (GPUs for tensor-parallel synthesis and 32 train workers, CPUs, serve replicas)."""

from __future__ import annotations

import ast
import importlib.util
import re
import shlex
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from embedforge.config import load_config
from embedforge.pipeline.resources import peak_gpus, shortfalls, stage_cpus, stage_gpus

REPO = Path(__file__).resolve().parents[2]
KUBERAY = REPO / "cluster" / "kuberay"
LAUNCHER = REPO / "cluster" / "launcher" / "aws-gpu.yaml"
APP = Path("/app")  # where the image (cluster/kuberay/Dockerfile) puts the repository


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def production():
    return load_config(REPO / "configs" / "nv-embed-v2.yaml")


def _in_repo(path: str) -> Path:
    """A path inside the image mapped back to the repository, which must have it."""
    local = REPO / Path(path).relative_to(APP)
    assert local.exists(), f"{path} names {local}, which does not exist"
    return local


def _group_capacity(cluster_spec: dict) -> tuple[float, float, int]:
    """(GPUs, CPUs, largest GPUs per pod) of a RayCluster spec at every worker group's maxReplicas."""
    gpus = cpus = 0.0
    per_pod = 0
    for group in cluster_spec["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        limits = container["resources"]["limits"]
        pod_gpus = int(limits.get("nvidia.com/gpu", 0))
        assert int(group["rayStartParams"].get("num-gpus", 0)) == pod_gpus, group["groupName"]
        assert group["rayStartParams"]["num-cpus"] == limits["cpu"], group["groupName"]
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        gpus += pod_gpus * group["maxReplicas"]
        cpus += float(limits["cpu"]) * group["maxReplicas"]
        per_pod = max(per_pod, pod_gpus)
    return gpus, cpus, per_pod


def _check_no_shared_writes(cluster_spec: dict) -> None:
    """Every pod of the cluster writes only to volumes of its own (emptyDir: scratch mirrors, caches), mounts shared
    volumes read-only, and reaches the run's bucket: its credentials secret and a scratch folder in its env."""
    pods = [cluster_spec["headGroupSpec"]["template"]["spec"]]
    pods += [group["template"]["spec"] for group in cluster_spec["workerGroupSpecs"]]
    for pod in pods:
        volumes = {v["name"]: v for v in pod["volumes"]}
        (container,) = pod["containers"]
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            if "emptyDir" not in volume:
                assert mount.get("readOnly") and volume["persistentVolumeClaim"]["readOnly"], mount["name"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        scratch = [m for m in container["volumeMounts"] if m["mountPath"] == env["EMBEDFORGE_SCRATCH"]]
        assert scratch and "emptyDir" in volumes[scratch[0]["name"]]
        assert {"secretRef": {"name": "embedforge-s3"}} in container["envFrom"]


def test_kuberay_specs_keep_runs_in_object_storage_not_on_shared_volumes():
    _check_no_shared_writes(_load(KUBERAY / "raycluster.yaml")["spec"])
    _check_no_shared_writes(_load(KUBERAY / "rayservice.yaml")["spec"]["rayClusterConfig"])


def test_a_stage_pinned_to_resources_no_node_has_is_named(tiny_config):
    tiny_config.train.resources = {"learn_node": 0.1}
    tiny_config.mine.teachers[0].resources = {"generate_node": 0.1}
    problems = shortfalls(tiny_config, {"CPU": 6.0, "generate_node": 1.0})
    assert problems == ["train runs only on nodes with the resources ['learn_node']; no node has them now"]


def _check_head(cluster_spec: dict) -> None:
    head = cluster_spec["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0", "no work on the head"
    (container,) = head["template"]["spec"]["containers"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"], "the head is CPU-only"
    assert cluster_spec["rayVersion"] == metadata.version("ray")
    assert cluster_spec["enableInTreeAutoscaling"] is True


def test_dockerfile_uses_our_ray_version():
    text = (KUBERAY / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{metadata.version('ray')}-py311-gpu" in text
    for copied in re.findall(r"^COPY --chown=\S+ (\S+)", text, flags=re.M):
        assert (REPO / copied).exists(), copied


def test_raycluster_holds_the_production_profile(production):
    spec = _load(KUBERAY / "raycluster.yaml")
    assert (spec["apiVersion"], spec["kind"]) == ("ray.io/v1", "RayCluster")
    _check_head(spec["spec"])
    gpus, cpus, per_pod = _group_capacity(spec["spec"])
    assert gpus == production.resources.num_gpus >= peak_gpus(production)
    assert cpus == production.resources.num_cpus
    assert shortfalls(production, {"GPU": gpus, "CPU": cpus}) == []
    generator = production.synth.generator
    assert per_pod >= generator.tensor_parallel_size * generator.num_gpus_per_engine, "TP engine on one node"
    assert stage_gpus(production)["train"] == production.train.num_workers == 32


def test_rayjob_runs_the_pipeline_with_the_production_profile(production):
    job = _load(KUBERAY / "rayjob.yaml")
    cluster = _load(KUBERAY / "raycluster.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "python"
    script = _in_repo(argv[1])
    assert script == REPO / "jobs" / "pipeline.py"
    assert load_config(_in_repo(argv[2])) == production
    assert argv[3] == "--run-dir" and argv[4].startswith("s3://")  # the run lives in object storage
    yaml.safe_load(job["spec"]["runtimeEnvYAML"])


def test_rayservice_serves_the_jobs_export(production):
    service = _load(KUBERAY / "rayservice.yaml")
    job = _load(KUBERAY / "rayjob.yaml")
    assert (service["apiVersion"], service["kind"]) == ("ray.io/v1", "RayService")
    serve_config = yaml.safe_load(service["spec"]["serveConfigV2"])
    local = _load(REPO / "configs" / "serve" / "local.yaml")
    (app,) = serve_config["applications"]
    assert app["import_path"] == local["applications"][0]["import_path"]
    module, attr = app["import_path"].split(":")
    source = Path(importlib.util.find_spec(module).origin)  # read, not imported: importing Serve takes long
    assert attr in {n.name for n in ast.parse(source.read_text()).body if isinstance(n, ast.FunctionDef)}
    assert load_config(_in_repo(app["args"]["config"])) == production
    run_dir = shlex.split(job["spec"]["entrypoint"])[4]
    assert app["args"]["model"] == f"{run_dir}/train/export/merged"
    cluster = service["spec"]["rayClusterConfig"]
    _check_head(cluster)
    gpus, _, per_pod = _group_capacity(cluster)
    assert per_pod >= production.serve.num_gpus
    assert gpus >= stage_gpus(production)["serve"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["maxReplicas"] == production.serve.autoscaling.max_replicas
    env = {e["name"] for e in group["template"]["spec"]["containers"][0]["env"]}
    assert production.serve.api_keys_env in env


def test_launcher_config_is_valid_and_holds_the_profile(production):
    from ray.autoscaler._private.util import prepare_config, validate_config

    raw = _load(LAUNCHER)
    validate_config(prepare_config(raw))  # Ray's own cluster-launcher schema
    nodes = raw["available_node_types"]
    assert nodes[raw["head_node_type"]]["resources"] == {"CPU": 0}
    workers = [n for name, n in nodes.items() if name != raw["head_node_type"]]
    gpus = sum(n["resources"].get("GPU", 0) * n["max_workers"] for n in workers)
    cpus = sum(n["resources"].get("CPU", 0) * n["max_workers"] for n in workers)
    assert gpus == production.resources.num_gpus
    assert cpus == production.resources.num_cpus
    assert max(n["resources"].get("GPU", 0) for n in workers) >= production.synth.generator.tensor_parallel_size
    assert raw["max_workers"] == sum(n["max_workers"] for n in workers)
    assert any("ray start --head" in c for c in raw["head_start_ray_commands"])


def test_resource_check_names_the_short_stage(production):
    problems = shortfalls(production, {"GPU": 8.0, "CPU": 16.0})
    assert problems == [
        "train needs 32 GPUs, the cluster has 8 now",
        "train needs 32 CPUs, the cluster has 16 now",
        "serve needs 32 CPUs, the cluster has 16 now",
    ]
    assert stage_gpus(production) == {"synth": 8.0, "mine": 8.0, "train": 32.0, "evaluate": 8.0, "serve": 8.0}


def test_synthesis_engines_and_mining_teachers_count_among_a_stages_cpus(tiny_config):
    tiny_config.synth.generator.cpus_per_engine, tiny_config.synth.generator.concurrency = 2.0, 2
    tiny_config.mine.teachers[0].num_cpus = 3.0
    assert {k: v for k, v in stage_cpus(tiny_config).items() if k in ("synth", "mine")} == {"synth": 4.0, "mine": 3.0}
    assert shortfalls(tiny_config, {"CPU": 3.0}) == ["synth needs 4 CPUs, the cluster has 3 now"]
