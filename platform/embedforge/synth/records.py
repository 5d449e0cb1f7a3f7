"""Turn a kept generation into a `TrainingExample` with MGH levels and full provenance.

MGH (seed 002) 2.1: negatives come ordered from most to least similar and keep levels 1 (hardest) .. 4 (easiest)
for the coarse-to-fine curriculum. Provenance records the generator, template, placeholders and judge verdict.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from embedforge.data.schema import TrainingExample
from embedforge.synth.plan import TASK_TYPES
from embedforge.synth.validate import rescale


def example_id(row_id: str, seed: int) -> str:
    return "synth-" + hashlib.sha1(f"{seed}:{row_id}".encode()).hexdigest()[:16]


def text_lengths(query: str, positive: str, negatives: list[str]) -> dict[str, int]:
    return {"query": len(query), "positive": len(positive), "negatives": sum(len(n) for n in negatives)}


def to_training_example(
    row: dict[str, Any], task_name: str, seed: int, generator: str, judge_model: str | None
) -> TrainingExample:
    """`row` is a worker output row whose status is valid; `task_name` the data source name (e.g. synthetic)."""
    negatives = json.loads(row["negatives"])
    judged = int(row["judge_score"]) > 0
    provenance = {
        "source": "synth",
        "generator": generator,
        "template": row["template"],
        "family": row["family"],
        "task": row["task"],
        "placeholders": json.loads(row["placeholders"]),
        "row_id": row["row_id"],
        "lengths": text_lengths(row["query"], row["positive"], negatives),
        "judge": {
            "model": judge_model,
            "score": int(row["judge_score"]),
            "rescaled": rescale(int(row["judge_score"])),
            "notes": json.loads(row["judge_notes"]),
        }
        if judged
        else None,
    }
    if row.get("doc_id"):
        provenance["doc_id"] = row["doc_id"]
    return TrainingExample(
        id=example_id(str(row["row_id"]), seed),
        task_name=task_name,
        task_type=TASK_TYPES[str(row["kind"])],
        instruction=str(row["task"]),
        query=row["query"],
        positive=row["positive"],
        negatives=negatives,
        negative_levels=list(range(1, len(negatives) + 1)),
        provenance=json.dumps(provenance, ensure_ascii=False),
    )
