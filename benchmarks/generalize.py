"""The generalist recipe judged on datasets it never trained on (issue: lift the backbone by 10 points on data it
never trained on).

Runs the generalist profile (configs/local.yaml: SmolLM2-135M, synth + mine + two-stage LoRA training) and scores
the untrained backbone, the trained model and all-MiniLM-L6-v2 on every shared dataset the run left out of training
(at least one per family where the shared data has one), next to the in-distribution tasks (other splits of its
training sets), each labelled. `--scale 2 4` also trains with every stage's steps multiplied, on the same synthetic
and mined data, so the curve of budget against gain shows. Writes benchmarks/results/generalize.json and generalize.png.

    .venv/bin/python benchmarks/generalize.py [--scale 1 2 4] [--set KEY=VALUE ...]
    .venv/bin/python benchmarks/generalize.py --scale 4 --data-from runs/generalize/x1   # x1 kept, not rerun
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedforge.config import EmbedforgeConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local.yaml"
MINILM = "bundled:all-minilm-l6-v2"
# banking77 classification scores 0 % for every SmolLM2 model at these sizes (77 intents): configs/local.yaml;
# dbpedia_entity_subset keeps ~3,000 judged passages for 30 queries, 15+ minutes per SmolLM2 model on 2 CPU cores:
# retrieval stays covered by trec_dl_msmarco_subset, and benchmarks/domain.py scores DBpedia in full;
# wikiqa_retrieval asks wikiqa's questions (scored here as reranking) of its 9,270 sentences: domain.py's corpus
SKIPPED = {"banking77", "dbpedia_entity_subset", "wikiqa_retrieval"}
# the protocol's seeded samples: every model and every run is scored on the same units
LIMITS = [
    "evaluate.max_examples_per_task=300",
    "evaluate.max_queries_per_task=30",
    "evaluate.max_corpus_documents=1000",
    "evaluate.classification_experiments=10",  # MTEB's protocol: 10 label-balanced draws (evaluate/tasks.py)
]
GOALS = {"ood_avg_gain": ">= 10", "ood_worst_task_delta": ">= -2"}


def protocol_tasks(config: EmbedforgeConfig) -> dict[str, str]:
    """task -> "left out" / "in-distribution": every shared task, labelled by what the config trains on."""
    from embedforge.evaluate.registry import SHARED_TASKS, task_provenance

    return {t: task_provenance(t, config) for t in SHARED_TASKS if t not in SKIPPED}


def scaled(config: EmbedforgeConfig, scale: int) -> EmbedforgeConfig:
    """The same recipe with every training stage's steps (and warmup, checkpoint cadence) multiplied by `scale`."""
    config = config.model_copy(deep=True)
    for stage in config.train.stages:
        stage.steps *= scale
        stage.warmup_steps *= scale
    config.train.checkpoint_every *= scale
    return config


def check_training_data(config: EmbedforgeConfig, source: Path) -> None:
    """`source`'s synth and mine stages are complete and were made with this config's settings for them."""
    from embedforge.mine.run import stage_settings as mine_settings
    from embedforge.runs.stage import read_manifest
    from embedforge.synth.run import stage_settings as synth_settings

    for stage, settings in (("synth", synth_settings), ("mine", mine_settings)):
        manifest = read_manifest(source / stage) or {}
        if manifest.get("status") != "complete" or manifest.get("config_hash") != settings(config)[1]:
            raise SystemExit(f"error: {source / stage} is not a complete {stage} stage of this recipe")


def link_shared_stages(source: Path, run_dir: Path) -> None:
    """A scaled run trains on the x1 run's synthetic and mined data (same seeds, same examples)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for stage in ("synth", "mine"):
        target = run_dir / stage
        if not target.exists():
            target.symlink_to((source / stage).resolve())


def summarise(manifest: dict[str, Any], labels: dict[str, str], start: str, backbone: str) -> dict[str, Any]:
    """Per-task scores x100 and the gain of the trained model over the starting model (`start`, evaluation's name
    for it), per label. When the run trains the backbone with other attention than the starting model's
    (`backbone`: the untrained backbone with the run's settings), that model's scores are kept beside them as
    `untrained_bidirectional`."""
    per_task = {}
    for task, scores in manifest["scores"].items():
        row = {name: round(100 * value, 2) for name, value in scores.items()}
        out = {"data": labels[task], "backbone": row[start], "trained": row["trained"], "minilm": row.get(MINILM)}
        out["gain"] = round(out["trained"] - out["backbone"], 2)
        if backbone != start:
            out["untrained_bidirectional"] = row[backbone]
        per_task[task] = out
    return {"tasks": per_task, **averages(per_task)}


def averages(per_task: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per label (left out, in-distribution): average scores and gain, the worst task's gain; for the left-out
    tasks also the average gain per family and over every family but classification (a figure that does not
    depend on the classification protocol)."""
    from embedforge.evaluate.registry import SHARED_TASKS

    out: dict[str, Any] = {}
    for label, key in (("left out", "ood"), ("in-distribution", "id")):
        tasks = [t for t, row in per_task.items() if row["data"] == label]
        if not tasks:
            continue
        gains = [per_task[t]["gain"] for t in tasks]
        out[f"{key}_avg_gain"] = _mean(gains)
        out[f"{key}_worst_task_delta"] = round(min(gains), 2)
        out[f"{key}_avg_trained"] = _mean([per_task[t]["trained"] for t in tasks])
        out[f"{key}_avg_backbone"] = _mean([per_task[t]["backbone"] for t in tasks])
        minilm = [per_task[t]["minilm"] for t in tasks if per_task[t]["minilm"] is not None]
        if len(minilm) == len(tasks):
            out[f"{key}_avg_minilm"] = _mean(minilm)
        if all("untrained_bidirectional" in per_task[t] for t in tasks):
            out[f"{key}_avg_untrained_bidirectional"] = _mean([per_task[t]["untrained_bidirectional"] for t in tasks])
    left_out = [t for t, row in per_task.items() if row["data"] == "left out"]
    families: dict[str, list[float]] = {}
    for task in left_out:
        families.setdefault(SHARED_TASKS[task].family, []).append(per_task[task]["gain"])
    if left_out:
        out["ood_gain_by_family"] = {family: _mean(gains) for family, gains in sorted(families.items())}
        others = [g for family, gains in families.items() if family != "classification" for g in gains]
        if others:
            out["ood_avg_gain_except_classification"] = _mean(others)
    return out


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 2)


def protocol_overrides(labels: dict[str, str], overrides: list[str]) -> list[str]:
    """The user's overrides plus the protocol: every labelled task, MiniLM beside the models, the seeded limits."""
    tasks = "[" + ", ".join(labels) + "]"
    return [*overrides, f"evaluate.tasks={tasks}", f"evaluate.baselines=[{MINILM}]", *LIMITS]


def run_protocol(
    config: EmbedforgeConfig, run_dir: Path, skip: tuple[str, ...], labels: dict[str, str]
) -> dict[str, Any]:
    """Run the pipeline (stages already complete for this config are reused) and summarise its evaluation."""
    from embedforge.pipeline.runner import run_pipeline
    from embedforge.pipeline.steps import starting_model

    started = time.time()
    run_pipeline(config, run_dir, skip=skip, config_source=str(CONFIG))
    train = json.loads((run_dir / "train" / "manifest.json").read_text())
    manifest = json.loads((run_dir / "evaluate" / "manifest.json").read_text())
    summary = summarise(manifest, labels, starting_model(config), config.model.backbone)
    summary["train_seconds"] = round(float(train["finished_at"]) - float(train["started_at"]), 1)
    summary["steps"] = sum(s.steps for s in config.train.stages)
    summary["wall_seconds"] = round(time.time() - started, 1)
    summary["contaminated_eval_rows"] = int(manifest.get("contaminated_eval_rows", 0))
    summary["decontaminated_units"] = manifest.get("contamination", {}).get("units", {})
    return summary


def earlier_scales(
    previous: dict[str, Any], results: dict[str, Any], recipe: dict[str, Any], protocol: str
) -> dict[str, Any]:
    """The larger budgets of the last result that this run did not train again, kept (each with the date it ran)
    when that result used the same recipe (config file, its content's hash, overrides) and protocol: one curve, one
    budget per run, never a budget of an earlier version of the config file."""
    if {k: previous.get(k) for k in recipe} != recipe or previous.get("protocol") != protocol:
        return {}
    return {
        name: {"date": previous["date"], **summary}
        for name, summary in previous.get("results", {}).items()
        if name not in results
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--scale", type=int, nargs="+", default=[1], help="step multipliers (1 is always run)")
    parser.add_argument("--runs", type=Path, default=Path("runs/generalize"))
    parser.add_argument(
        "--data-from",
        type=Path,
        help="an x1 run dir of this recipe whose synth and mine stages the --scale runs train on, instead of "
        "running x1 again (the last result's x1 is kept)",
    )
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument(
        "--experiment",
        help="record this run as a named experiment beside the recipe's own result (kept, whatever it scores)",
    )
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import RESULTS, machine_info, previous_result, record_experiment, write_result
    from quality_plots import plot_generalize

    from embedforge.cluster.local import start_private_cluster
    from embedforge.config import load_config
    from embedforge.config.loader import config_hash
    from embedforge.pipeline.steps import starting_model

    torch.set_num_threads(2)
    machine = machine_info()
    base = load_config(str(CONFIG), args.overrides)
    labels = protocol_tasks(base)
    families = {}
    from embedforge.evaluate.registry import SHARED_TASKS

    for task, label in labels.items():
        families.setdefault(SHARED_TASKS[task].family, set()).add(label)
    uncovered = sorted(f for f, seen in families.items() if "left out" not in seen)
    if uncovered:
        logging.warning("families with no left-out dataset in this recipe: %s", uncovered)
    config = load_config(str(CONFIG), protocol_overrides(labels, args.overrides))
    if starting_model(config) != config.model.backbone:  # also score the untrained backbone with the run's attention
        config.evaluate.baselines.append(config.model.backbone)
    # a private cluster: never join a development head another process left running on this machine
    start_private_cluster(2, 1024**3)
    protocol = (
        "whole shared datasets left out of training, scored beside the in-distribution tasks; "
        f"scores x100, gain = trained - untrained backbone ({base.model.pooling} pooling); limits {LIMITS}; "
        "classification: MTEB's label-balanced draws"
    )
    results, ratios = {}, {}
    first = (args.data_from or args.runs / "x1").resolve()
    if args.data_from:
        check_training_data(config, first)
    for scale in sorted({*args.scale} if args.data_from else {1, *args.scale}):
        run_dir = (args.runs / f"x{scale}").resolve()
        if scale != 1:
            link_shared_stages(first, run_dir)
        skip = ("deploy",) if scale == 1 else ("synth", "mine", "deploy")
        # each budget says where it ran: a result may keep budgets trained on other machines (earlier_scales)
        ran_on = machine_info()
        summary = {
            "date": ran_on["date"],
            "machine": ran_on,
            **run_protocol(scaled(config, scale), run_dir, skip, labels),
        }
        results[f"x{scale}"] = summary
        suffix = "" if scale == 1 else f"_x{scale}"
        for key in ("ood_avg_gain", "ood_worst_task_delta", "id_avg_gain"):
            if key in summary:
                ratios[key + suffix] = summary[key]
        logging.info("x%d: %s", scale, {k: v for k, v in summary.items() if k != "tasks"})
    if args.experiment:
        entry = {
            "overrides": args.overrides,
            "protocol": protocol,
            "starting_model": starting_model(config),
            "date": machine["date"],
            "ratios": ratios,
            "summary": {k: {x: v for x, v in r.items() if x != "tasks"} for k, r in results.items()},
            "tasks": {k: r["tasks"] for k, r in results.items()},
        }
        print(record_experiment("generalize", args.experiment, entry, GOALS).read_text())
        return
    previous = previous_result("generalize")
    recipe = {
        "config": str(CONFIG.relative_to(CONFIG.parents[1])),
        "config_hash": config_hash(base),
        "overrides": args.overrides,
    }
    kept = earlier_scales(previous, results, recipe, protocol)
    for name, summary in kept.items():
        results[name] = summary
        for key in ("ood_avg_gain", "ood_worst_task_delta", "id_avg_gain"):
            ratios[key + ("" if name == "x1" else f"_{name}")] = summary[key]
    path = write_result(
        "generalize",
        {
            "machine": machine,
            **recipe,
            "protocol": protocol,
            "families_without_left_out_dataset": uncovered,
            "results": dict(sorted(results.items(), key=lambda item: int(item[0][1:]))),
            "ratios": ratios,
            "goals": GOALS,
        },
    )
    plot_generalize(json.loads(path.read_text()), RESULTS / "generalize.png")
    print(path.read_text())


if __name__ == "__main__":
    main()
