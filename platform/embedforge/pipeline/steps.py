"""The pipeline's steps, in order, each a call to one stage's agreed entry point (see the stage contracts).

Stage modules are imported only when their step runs, so a missing stage fails with a message naming it instead
of breaking the import of the whole pipeline. NV-Embed (seed 000) sections 3.3 and 4: data synthesis, hard
negative mining, two-stage contrastive instruction tuning, then evaluation of the trained embedder.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embedforge.config import EmbedforgeConfig
from embedforge.config.evaluate import TRAINED
from embedforge.evaluate.models import model_settings
from embedforge.model.formats import EXPORT_FORMATS
from embedforge.pipeline.deploy_guard import DeployDecision, decide
from embedforge.pipeline.probe import probe_endpoint
from embedforge.runs.store import is_remote, store_of

log = logging.getLogger(__name__)


class StageNotBuiltError(RuntimeError):
    """A stage's module or entry point does not exist in this checkout."""


@dataclass(frozen=True)
class Step:
    """One pipeline step. `run` returns the stage's manifest (or, for export/deploy, what they produced)."""

    name: str
    title: str
    enabled: Callable[[EmbedforgeConfig], bool]
    run: Callable[[EmbedforgeConfig, Path], dict[str, Any]]


def entry_point(module: str, attr: str) -> Callable[..., Any]:
    """Import `module.attr`; a missing stage module or function raises StageNotBuiltError naming it."""
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name is not None and (module == err.name or module.startswith(f"{err.name}.")):
            raise StageNotBuiltError(f"{module} does not exist: that stage is not built in this checkout") from err
        raise
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise StageNotBuiltError(f"{module} has no function {attr!r}: that stage is not built in this checkout")
    return fn


def export_dir(run_dir: Path, fmt: str) -> Path:
    return run_dir / "train" / "export" / fmt


def served_model(config: EmbedforgeConfig, run_dir: Path) -> str:
    """`serve.model` when the config names one, else the pipeline's merged export (loads without peft); in the
    run's object store when it has one, so replicas on any node copy it from there."""
    store = store_of(run_dir)
    return config.serve.model or (store.child("train/export/merged") if store else str(export_dir(run_dir, "merged")))


def _trains(config: EmbedforgeConfig) -> bool:
    return config.train.enabled and bool(config.train.stages)


def starting_model(config: EmbedforgeConfig) -> str:
    """Evaluation's name for the model the run starts from, as its user has it: the backbone with the run's model
    settings, except that a decoder the run trains with bidirectional attention (NV-Embed 3.1) keeps the causal
    attention it was pretrained with (`?bidirectional=false`, see evaluate.models). So every recipe on one
    backbone is measured from the same model, whichever attention it trains. A backbone the driver cannot read
    (in object storage, which is not copied to the driver, or on the workers' disks only) is taken for a decoder
    when the config sets `bidirectional: true`."""
    from embedforge.model.backbone_spec import read_backbone_spec, resolve_model_config
    from embedforge.models.bundled import resolve_model

    backbone, bidirectional = config.model.backbone, config.model.bidirectional
    if bidirectional is False:
        return backbone
    try:
        spec = None if is_remote(backbone) else read_backbone_spec(resolve_model(backbone))
    except FileNotFoundError:
        spec = None
    if spec is None:
        is_decoder = bool(bidirectional)
    else:
        is_decoder = spec.is_decoder and resolve_model_config(config.model, spec).bidirectional
    return f"{backbone}?bidirectional=false" if is_decoder else backbone


def comparison_models(config: EmbedforgeConfig) -> list[str]:
    """Trained model (evaluation's name for run_dir/train/model), the starting model, every model-backed
    teacher, then the configured baselines; no repeats."""
    refs = [TRAINED] if _trains(config) else []
    refs.append(starting_model(config))
    refs += [t.model for t in config.mine.teachers if t.model and config.mine.enabled]
    refs += config.evaluate.baselines
    return list(dict.fromkeys(refs))


def _synth(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    return entry_point("embedforge.synth.run", "run_synth")(config, run_dir)


def _mine(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    return entry_point("embedforge.mine.run", "run_mine")(config, run_dir)


def _train(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    return entry_point("embedforge.train.run", "run_train")(config, run_dir)


def _evaluate(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    models = comparison_models(config)
    return entry_point("embedforge.evaluate.run", "run_evaluate")(config, run_dir, models=models)


def _export(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    """Training writes the exports (merged checkpoint + sentence-transformers folder); check both are there, and
    put the run's evaluation of the trained model into their model cards."""
    from embedforge.model.card import with_evaluation

    evaluation = trained_model_scores(run_dir)
    found = {}
    for fmt in EXPORT_FORMATS:
        folder = export_dir(run_dir, fmt)
        files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        if not files:
            raise FileNotFoundError(f"export {fmt!r} missing or empty at {folder}: training did not export it")
        card = folder / "README.md"
        if evaluation and card.is_file():
            card.write_text(
                with_evaluation(card.read_text(), evaluation, "the run's evaluation (evaluate/report.json)")
            )
        found[fmt] = {"path": str(folder), "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    return {"exports": found}


def trained_model_scores(run_dir: Path) -> dict[str, dict[str, float]]:
    """The trained model's main score on each task of the run's evaluation report ({} before evaluation)."""
    report = run_dir / "evaluate" / "report.json"
    if not report.is_file():
        return {}
    tasks = json.loads(report.read_text()).get("tasks", {})
    return {
        task: {info["main_metric"]: float(info["scores"][TRAINED])}
        for task, info in tasks.items()
        if TRAINED in info.get("scores", {})
    }


def deploy_decision(config: EmbedforgeConfig, run_dir: Path) -> DeployDecision | None:
    """The guard on the trained model (pipeline.deploy_guard), from the run's evaluation; None when the run did
    not train and evaluate, or `serve.model` names the model to serve."""
    manifest = run_dir / "evaluate" / "manifest.json"
    if config.serve.model or not _trains(config) or not config.evaluate.enabled or not manifest.is_file():
        return None
    scores = json.loads(manifest.read_text()).get("scores", {})
    return decide(scores, TRAINED, starting_model(config), config.evaluate.deploy_guard)


def _deploy(config: EmbedforgeConfig, run_dir: Path) -> dict[str, Any]:
    decision = deploy_decision(config, run_dir)
    model, settings = served_model(config, run_dir), None
    if decision and decision.deploy == "start":  # served as evaluation scored it: the run's model settings
        model, settings = model_settings(starting_model(config), config.model)
    if decision:
        log.info("deploy decision: %s (%s)", decision.deploy, decision.reason)
    url = entry_point("embedforge.serve.deploy", "deploy")(config, model, model_config=settings)
    out = {"endpoint": url, "model": model, "probe": probe_endpoint(url, config)}
    return out | ({"decision": decision.as_dict()} if decision else {})


def default_steps() -> list[Step]:
    return [
        Step("synth", "synthesize training data (vLLM on Ray Data)", lambda c: c.synth.enabled, _synth),
        Step("mine", "mine hard negatives (teachers + faiss on Ray Data)", lambda c: c.mine.enabled, _mine),
        Step("train", "train the embedder, both stages (Ray Train)", _trains, _train),
        Step("evaluate", "evaluate trained vs untrained base vs teacher", lambda c: c.evaluate.enabled, _evaluate),
        Step("export", "check the merged and sentence-transformers exports", _trains, _export),
        Step("deploy", "deploy the exported embedder (Ray Serve)", lambda c: True, _deploy),
    ]


STEP_NAMES = tuple(step.name for step in default_steps())
