"""What a served `dimensions` costs, with and without Matryoshka training (`train.matryoshka`; Kusupati et al.,
"Matryoshka Representation Learning", NeurIPS 2022).

Trains the generalist profile (configs/local.yaml) twice on the synthetic and mined data of a finished x1 run of
benchmarks/generalize.py (`--data-from`): as it is, and with `train.matryoshka.dims` [64, 128, 256] (SmolLM2's
full width is 576). Both runs score their trained model, the untrained backbone and all-MiniLM-L6-v2 on the
generalize protocol (the same tasks, labels and seeded samples) at every size (`evaluate.dimensions`: the vectors
cut to the first d coordinates and renormalised, as serving answers `dimensions`). Writes
benchmarks/results/matryoshka.json and matryoshka.png: each model's left-out average at each size (the last one
its full width), and ratios `matryoshka_minus_plain_ood_avg_<size>` (at 576: what the Matryoshka terms cost at
the full size).

    .venv/bin/python benchmarks/matryoshka.py [--data-from runs/generalize/x1]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = (64, 128, 256)
VARIANTS = {"plain": [], "matryoshka": [f"train.matryoshka.dims=[{', '.join(map(str, SIZES))}]"]}


def width(ref: str) -> int:
    """The width of a model reference's vectors, read from its folder."""
    from embedforge.evaluate.models import split_reference
    from embedforge.model.backbone_spec import read_backbone_spec
    from embedforge.models.bundled import resolve_model

    found = read_backbone_spec(resolve_model(split_reference(ref)[0])).hidden_size
    if found is None:
        raise SystemExit(f"error: {ref}'s config names no hidden_size")
    return found


def size_scores(manifest: dict[str, Any], labels: dict[str, str], models: dict[str, tuple[str, str]]) -> dict:
    """model -> size -> {"tasks": task -> score x100, "ood_avg": left-out average}, the full size under the
    model's own width; `models` maps a short name to (evaluation's name for the model, whose cut sizes it reports
    as NAME@SIZE; a reference to its folder)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for short, (name, ref) in models.items():
        out[short] = {}
        full = width(ref)
        for size in (*SIZES, full):
            reported = name if size == full else f"{name}@{size}"
            tasks = {task: round(100 * scores[reported], 2) for task, scores in manifest["scores"].items()}
            left_out = [tasks[t] for t in tasks if labels[t] == "left out"]
            out[short][str(size)] = {"tasks": tasks, "ood_avg": round(sum(left_out) / len(left_out), 2)}
    return out


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.6))
    lines = (
        ("matryoshka", "trained", "trained with train.matryoshka", "tab:blue", "o-"),
        ("plain", "trained", "trained without it", "tab:blue", "o--"),
        ("plain", "minilm", "all-MiniLM-L6-v2", "tab:orange", "s:"),
        ("plain", "backbone", "untrained backbone", "tab:gray", "^:"),
    )
    for variant, model, label, color, style in lines:
        scores = results[variant][model]
        shown = sorted(int(size) for size in scores)
        ax.plot(shown, [scores[str(size)]["ood_avg"] for size in shown], style, color=color, label=label)
    ticks = sorted({int(size) for variant in results.values() for model in variant.values() for size in model})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(size) for size in ticks])
    ax.minorticks_off()
    ax.set_xlabel("dimensions served (the first d coordinates, renormalised; last: the full width)")
    ax.set_ylabel("average score x100, left-out datasets")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    ax.set_title("Generalist recipe (SmolLM2-135M) cut to fewer dimensions", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--data-from",
        type=Path,
        default=Path("runs/generalize/x1"),
        help="a finished x1 run of benchmarks/generalize.py (default: where it leaves one; `make bench` runs it first)",
    )
    parser.add_argument("--runs", type=Path, default=Path("runs/matryoshka"))
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import RESULTS, machine_info, write_result
    from generalize import CONFIG, MINILM, check_training_data, link_shared_stages, protocol_overrides, protocol_tasks

    from embedforge.cluster.local import start_private_cluster
    from embedforge.config import load_config
    from embedforge.pipeline.runner import run_pipeline
    from embedforge.pipeline.steps import starting_model

    torch.set_num_threads(2)
    machine = machine_info()
    source = args.data_from.resolve()
    start_private_cluster(2, 1024**3)
    results: dict[str, Any] = {}
    for variant, overrides in VARIANTS.items():
        labels = protocol_tasks(load_config(str(CONFIG), overrides))
        sizes = f"evaluate.dimensions=[{', '.join(map(str, SIZES))}]"
        config = load_config(str(CONFIG), protocol_overrides(labels, [*overrides, sizes]))
        check_training_data(config, source)
        run_dir = (args.runs / variant).resolve()
        link_shared_stages(source, run_dir)
        run_pipeline(config, run_dir, skip=("synth", "mine", "deploy"), config_source=str(CONFIG))
        manifest = json.loads((run_dir / "evaluate" / "manifest.json").read_text())
        start = starting_model(config)
        models = {"trained": ("trained", config.model.backbone), "backbone": (start, start), "minilm": (MINILM, MINILM)}
        results[variant] = size_scores(manifest, labels, models)
        logging.info(
            "%s: %s", variant, {m: {s: v["ood_avg"] for s, v in r.items()} for m, r in results[variant].items()}
        )
    trained = {variant: results[variant]["trained"] for variant in VARIANTS}
    ratios = {
        f"matryoshka_minus_plain_ood_avg_{size}": round(
            trained["matryoshka"][size]["ood_avg"] - trained["plain"][size]["ood_avg"], 2
        )
        for size in trained["plain"]
    }
    path = write_result(
        "matryoshka",
        {
            "machine": machine,
            "data_from": str(args.data_from),
            "sizes": list(SIZES),
            "variants": VARIANTS,
            "protocol": "benchmarks/generalize.py's tasks, labels and seeded samples; left-out average x100",
            "results": results,
            "ratios": ratios,
            "goals": {name: "reported" for name in ratios},
        },
    )
    plot(results, RESULTS / "matryoshka.png")
    print(path.read_text())


if __name__ == "__main__":
    main()
