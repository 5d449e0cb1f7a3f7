"""`python -m embedforge.pipeline.demo [CONFIG]` (what `make demo` runs): the whole pipeline on a local Ray head.

Prepares the bundled models, starts the local head with its dashboard, submits `jobs/pipeline.py` with
`ray job submit` and follows its log, makes sure the trained embedder is deployed with `embedforge.serve`, then
prints the endpoint, a curl and an openai-client example (both run here first), and the evaluation table.
The deployment is left running; the end of the output says how to stop it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from embedforge.cluster import local
from embedforge.config import ConfigError, EmbedforgeConfig, load_config
from embedforge.config.evaluate import TRAINED
from embedforge.evaluate.registry import HELDOUT_TASK
from embedforge.evaluate.report import percent
from embedforge.logs import configure_logging
from embedforge.models.bundled import prepare
from embedforge.paths import BUNDLED_PREFIX, REPO_ROOT
from embedforge.pipeline.probe import PROBE_TEXT, api_key, base_url, probe_endpoint
from embedforge.pipeline.runner import read_pipeline
from embedforge.pipeline.steps import deploy_decision, entry_point, served_model, starting_model
from embedforge.pipeline.submit import submit_pipeline

log = logging.getLogger("embedforge.demo")
MINILM = "bundled:all-minilm-l6-v2"


def bundled_models(config: EmbedforgeConfig) -> list[str]:
    """Names of the bundled models the config refers to (backbone, generator, teachers, baselines); a disabled
    synth or mine section needs none of its models."""
    found: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and value.startswith(BUNDLED_PREFIX):
            found.append(value.removeprefix(BUNDLED_PREFIX).split("?")[0])  # drop options such as ?pooling=last

    dump = config.model_dump(mode="json")
    for section in ("synth", "mine"):
        if not getattr(config, section).enabled:
            dump.pop(section)
    walk(dump)
    return sorted(set(found))


def _say(step: str, started: float) -> None:
    print(f"\n==> [{time.time() - started:6.0f}s] {step}", flush=True)


def _ensure_deployed(config: EmbedforgeConfig, run_dir: Path) -> str:
    """The endpoint the job deployed when it still answers; otherwise deploy the exported model again here."""
    record = read_pipeline(run_dir) or {}
    endpoint = record.get("steps", {}).get("deploy", {}).get("endpoint")
    if endpoint:
        try:
            probe_endpoint(endpoint, config)
            return endpoint
        except OSError as err:
            print(f"the job's endpoint {endpoint} does not answer ({err}); deploying again")
    local.connect()
    return entry_point("embedforge.serve.deploy", "deploy")(config, served_model(config, run_dir))


def print_examples(endpoint: str, config: EmbedforgeConfig) -> None:
    """Run a curl command and the openai client against the endpoint, then print both for the user."""
    from openai import OpenAI

    url, key, var = base_url(endpoint), api_key(config), config.serve.api_keys_env
    body = json.dumps({"model": config.serve.model_name, "input": ["What is Ray Serve?"]})
    curl = ["curl", "-s", "--fail", f"{url}/v1/embeddings", "-H", "Content-Type: application/json", "-d", body]
    if shutil.which("curl"):
        auth = ["-H", f"Authorization: Bearer {key}"] if key else []  # the key is used, never printed
        answer = subprocess.run([*curl, *auth], capture_output=True, text=True, check=True).stdout
        print(f"curl answered with a {len(json.loads(answer)['data'][0]['embedding'])}-d embedding:")
    print(f"  {shlex.join(curl)}" + (f' -H "Authorization: Bearer ${var}"' if key else ""))
    client = OpenAI(base_url=f"{url}/v1", api_key=key or "unused")
    vector = client.embeddings.create(model=config.serve.model_name, input=[PROBE_TEXT]).data[0].embedding
    print(f"\nthe openai client answered with a {len(vector)}-d embedding:")
    print("  import os; from openai import OpenAI")
    print(f"  client = OpenAI(base_url='{url}/v1', api_key={f'os.environ[{var!r}]' if key else repr('unused')})")
    print(f"  client.embeddings.create(model='{config.serve.model_name}', input=['What is Ray Serve?'])")


def outcome_table(config: EmbedforgeConfig, run_dir: Path) -> str:
    """The run's verdict: per evaluated task, the starting model, all-MiniLM-L6-v2 and the trained model side by
    side, each task labelled by whether the run trained on its dataset (`registry.task_provenance`: the validation
    slice and datasets the run never saw are "left out"), then the average per label and the deploy decision."""
    manifest = run_dir / "evaluate" / "manifest.json"
    if not manifest.is_file():
        return ""
    evaluation = json.loads(manifest.read_text())
    scores, labels = evaluation.get("scores", {}), evaluation.get("data", {})
    start = starting_model(config)
    columns = {"starting model": start, "all-MiniLM-L6-v2": MINILM, "trained": TRAINED}

    def cells(per_model: dict[str, float]) -> str:
        return " | ".join(percent(per_model.get(ref)) for ref in columns.values())

    lines = ["| task | data | " + " | ".join(columns) + " |", "|---|---|" + "---|" * len(columns)]
    guard = config.evaluate.deploy_guard.task
    for task, per_model in scores.items():
        label = f"{task} (validation slice: held-out synthetic queries)" if task == HELDOUT_TASK else task
        label += " (deploy guard)" if task == guard and task != HELDOUT_TASK else ""
        lines.append(f"| {label} | {labels.get(task) or '-'} | {cells(per_model)} |")
    for data, averages in evaluation.get("average_by_data", {}).items():
        lines.append(f"| **average, {data}** | | {cells(averages)} |")
    decision = deploy_decision(config, run_dir)
    if decision is not None:
        served = "the trained model" if decision.deploy == "trained" else f"the starting model ({start})"
        lines.append(f"\ndeployed: {served}, because {decision.reason}")
    return "\n".join(lines)


def _release_earlier_deployment(dashboard: str, wait_s: float = 60.0) -> None:
    """An earlier demo's deployment holds CPUs of the head, which the stages need: stop it (the run's deploy step
    serves again at the end) and wait until Serve has let its replicas go."""
    serve_cli = str(Path(sys.executable).parent / "serve")

    def deployed() -> bool:
        status = subprocess.run(
            [serve_cli, "status", "--address", dashboard], capture_output=True, text=True, env=local.client_env()
        )
        return status.returncode == 0 and "applications: {}" not in status.stdout

    if not deployed():
        return
    print("  stopping the deployment of an earlier run on this head (the demo deploys its model again)")
    subprocess.run([serve_cli, "shutdown", "--address", dashboard, "-y"], capture_output=True, env=local.client_env())
    deadline = time.monotonic() + wait_s
    while deployed() and time.monotonic() < deadline:
        time.sleep(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m embedforge.pipeline.demo", description=__doc__)
    parser.add_argument("config", nargs="?", default="configs/documents.yaml")
    parser.add_argument("--run-dir", type=Path, default=None, help="default: runs/demo-<config name>")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    configure_logging()
    started = time.time()
    config_path = Path(args.config)
    if not config_path.is_absolute() and not config_path.exists():
        config_path = REPO_ROOT / config_path  # `make demo` names configs relative to the repository
    config_path = config_path.resolve()
    try:
        config = load_config(config_path, args.overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 1
    run_dir = (args.run_dir or REPO_ROOT / "runs" / f"demo-{config.name}").resolve()
    # the head's job drivers must find this venv's python, ray and embedforge first
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    # the `ray job submit` client sends the head's token only in token mode (see embedforge.cluster.local)
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    for name, value in {**offline, "RAY_AUTH_MODE": local.AUTH_MODE}.items():
        os.environ.setdefault(name, value)

    _say("preparing the bundled models (once; cached afterwards)", started)
    for name, path in prepare(bundled_models(config)).items():
        print(f"  {name}: {path}")
    _say("starting the local Ray head", started)
    dashboard = local.up()
    print(f"  dashboard: {dashboard}  (Jobs: the pipeline job and its log; Actors: the workers; Serve: the endpoint)")
    _release_earlier_deployment(dashboard)
    _say(f"submitting the pipeline job ({config_path.name}, run dir {run_dir})", started)
    extra = [arg for item in args.overrides for arg in ("--set", item)]
    code = submit_pipeline(dashboard, str(config_path), run_dir, extra)
    if code != 0:
        print(
            f"\nthe pipeline job failed (exit {code}); its log is above and in the dashboard, "
            f"its record in {run_dir / 'pipeline.json'}",
            file=sys.stderr,
        )
        return code
    _say("checking the deployment", started)
    endpoint = _ensure_deployed(config, run_dir)
    print_examples(endpoint, config)
    report = run_dir / "evaluate" / "report.md"
    if report.is_file():
        _say(f"evaluation ({report}; plot beside it as report.png)", started)
        print(report.read_text())
        _say("the verdict: the model this run started from, the one you already have, and the trained one", started)
        print(outcome_table(config, run_dir))
    _say(f"demo finished in {time.time() - started:.0f}s", started)
    if (run_dir / "train" / "tensorboard").is_dir():
        print("Training curves (each loss term, learning rate, gradient norm, tokens/s) in TensorBoard:")
        print(f"  {Path(sys.executable).parent / 'tensorboard'} --logdir {run_dir / 'train'}")
    print("The deployment keeps running. Stop it with:")
    print(f"  {Path(sys.executable).parent / 'serve'} shutdown --address {dashboard} -y   # the embedder only")
    print("  make cluster-down                                   # the whole local Ray head")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
