"""Why SICK-NLI is the worst left-out task of the generalist recipe: its contradictions are negations.

SICK-NLI is scored as pair classification (entailment 1 vs contradiction 0, AP of the cosine; evaluate/registry.py).
This benchmark splits the scored pairs by whether the two sentences differ in a negation cue ("no", "not",
"nobody", "n't", ...), counts the same cue in the hard negatives a finished generalize run trained on
(`RUN/mine/data`), and shows for the untrained backbone, that run's trained model and all-MiniLM-L6-v2 how far apart
each kind of pair lies: mean cosine of entailed pairs, of negated contradictions and of other contradictions.
Writes benchmarks/results/negation.json.

    .venv/bin/python benchmarks/negation.py --run runs/generalize/x1
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedforge.config import EmbedforgeConfig
    from embedforge.evaluate.tasks import PairClassificationTask

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import write_result
from generalize import CONFIG, LIMITS, MINILM

TASK = "sick_nli"
NEGATION = re.compile(r"\b(?:no|not|none|nobody|nothing|nowhere|never|neither|nor|cannot)\b|n't\b", re.IGNORECASE)


def negation_cues(text: str) -> int:
    """How many negation cues a sentence holds (the contracted "n't" counts as one)."""
    return len(NEGATION.findall(text))


def differs_by_negation(a: str, b: str) -> bool:
    """True when exactly one of the two sentences is negated: "A deer is jumping" / "A deer isn't jumping"."""
    return (negation_cues(a) > 0) != (negation_cues(b) > 0)


def training_negation_shares(mine_dir: Path) -> dict[str, float]:
    """Per source of the mined training data (and "all"): the share of (positive, hard negative) pairs in which
    exactly one side is negated."""
    from embedforge.data.io import read_parquet
    from embedforge.data.schema import TrainingExample

    pairs: dict[str, list[bool]] = {}
    for example in read_parquet(mine_dir / "data", TrainingExample):
        flags = [differs_by_negation(example.positive, negative) for negative in example.negatives]
        pairs.setdefault(example.task_name, []).extend(flags)
    pairs["all"] = [flag for flags in list(pairs.values()) for flag in flags]
    return {source: round(sum(flags) / len(flags), 4) for source, flags in sorted(pairs.items()) if flags}


def pair_groups(pairs: list) -> dict[str, list[int]]:
    """Indices of the entailed pairs, of the contradictions in which one side is negated, and of the others."""
    groups: dict[str, list[int]] = {"entailment": [], "negated_contradiction": [], "other_contradiction": []}
    for i, pair in enumerate(pairs):
        if pair.score == 1.0:
            groups["entailment"].append(i)
        elif differs_by_negation(pair.text1, pair.text2):
            groups["negated_contradiction"].append(i)
        else:
            groups["other_contradiction"].append(i)
    return groups


def score_model(
    ref: str, task: PairClassificationTask, config: EmbedforgeConfig, groups: dict[str, list[int]]
) -> dict[str, float]:
    """AP as the evaluation scores it, and the mean cosine of each group of pairs."""
    import numpy as np

    from embedforge.evaluate import metrics
    from embedforge.evaluate.models import load_model
    from embedforge.evaluate.scoring import pair_cosines

    cos = pair_cosines(task, load_model(ref, config.model), config.evaluate.batch_size)
    labels = [int(p.score) for p in task.pairs]
    scores = {"cosine_ap": round(100 * metrics.pair_average_precision(labels, cos), 2)}
    for name, idx in groups.items():
        scores[f"mean_cosine_{name}"] = round(float(np.mean(cos[idx])), 4)
    scores["entailment_minus_negated"] = round(
        scores["mean_cosine_entailment"] - scores["mean_cosine_negated_contradiction"], 4
    )
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a finished generalize run (its x1 folder)")
    parser.add_argument("--config", type=Path, default=CONFIG)
    args = parser.parse_args()

    from embedforge.config import load_config
    from embedforge.evaluate.registry import build_task
    from embedforge.evaluate.run import limited_task, trained_model_dir

    trained = trained_model_dir(args.run)
    if not trained.is_dir() or not (args.run / "mine" / "data").is_dir():
        raise SystemExit(f"error: {args.run} is not a finished run (needs train/model and mine/data)")
    config = load_config(args.config, LIMITS)
    task = limited_task(build_task(TASK, config.evaluate), config)
    groups = pair_groups(task.pairs)
    contradictions = len(groups["negated_contradiction"]) + len(groups["other_contradiction"])
    entailed_negated = sum(differs_by_negation(task.pairs[i].text1, task.pairs[i].text2) for i in groups["entailment"])
    training = training_negation_shares(args.run / "mine")
    models = {"backbone": config.model.backbone, "trained": str(trained), "minilm": MINILM}
    scores = {}
    for name, ref in models.items():
        scores[name] = score_model(ref, task, config, groups)
        print(f"{name}: {scores[name]}", flush=True)
    margin = {name: s["entailment_minus_negated"] for name, s in scores.items()}
    result = {
        "name": "negation",
        "task": TASK,
        "run": str(args.run),
        "pairs": {name: len(idx) for name, idx in groups.items()},
        "sick_nli_entailments_negated_share": round(entailed_negated / len(groups["entailment"]), 4),
        "training_negatives_negated_share": training,
        "scores": scores,
        "ratios": {
            "sick_nli_contradictions_negated_share": round(len(groups["negated_contradiction"]) / contradictions, 4),
            "training_negatives_negated_share": training["all"],
            "trained_over_backbone_negation_margin": round(margin["trained"] / margin["backbone"], 3),
        },
        "goals": {
            "sick_nli_contradictions_negated_share": "reported",
            "training_negatives_negated_share": "reported",
            "trained_over_backbone_negation_margin": "reported",
        },
    }
    print(f"wrote {write_result('negation', result)}")


if __name__ == "__main__":
    main()
