"""Which training examples each stage dataset uses: the mined ones when mining covered the source, else the
source itself through `embedforge.data.sources.load_source` (the contract between mining and training)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from embedforge.config import EmbedforgeConfig
from embedforge.data.io import read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.data.sources import load_source, source_drops
from embedforge.runs.stage import read_manifest

log = logging.getLogger(__name__)


def stage_sources(config: EmbedforgeConfig) -> list[str]:
    """Names of the sources any training stage uses, in first-use order."""
    names: list[str] = []
    for stage in config.train.stages:
        names += [d.source for d in stage.datasets if d.source not in names]
    return names


def mined_dir(run_dir: Path) -> Path | None:
    """`run_dir/mine` when mining completed there."""
    folder = run_dir / "mine"
    manifest = read_manifest(folder)
    return folder if manifest is not None and manifest.get("status") == "complete" else None


@dataclass
class TrainingData:
    """Examples per source, where each source's came from ("mine" or "source"), and the rows lost loading the
    sources read directly (`data.sources.source_drops`; mined sources count theirs in the mine manifest)."""

    examples: dict[str, list[TrainingExample]]
    origin: dict[str, str]
    drops: dict[str, int] = field(default_factory=dict)


def load_training_examples(config: EmbedforgeConfig, run_dir: Path) -> TrainingData:
    """Every training stage's sources: the mined examples when mining covered the source, else the source itself."""
    mined: dict[str, list[TrainingExample]] = {}
    folder = mined_dir(run_dir)
    if folder is not None and (folder / "data").is_dir():
        for ex in read_parquet(folder / "data", TrainingExample):
            mined.setdefault(ex.task_name, []).append(ex)
    by_name = {s.name: s for s in config.data.sources}
    data = TrainingData({}, {})
    for name in stage_sources(config):
        if mined.get(name):
            data.examples[name], data.origin[name] = mined[name], "mine"
        else:
            converted = load_source(by_name[name], run_dir, config.data.seed)
            data.examples[name], data.origin[name] = converted.examples, "source"
            data.drops.update(source_drops(by_name[name], converted))
        if not data.examples[name]:
            raise ValueError(f"train: data source {name!r} gave no training examples")
        log.info("train source %s: %d examples from %s", name, len(data.examples[name]), data.origin[name])
    return data
