"""Which training examples each stage dataset uses: the mined ones when mining covered the source, else the
source itself through `embedforge.data.sources.load_source` (the contract between mining and training)."""

from __future__ import annotations

import logging
from pathlib import Path

from embedforge.config import EmbedforgeConfig
from embedforge.data.io import read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.data.sources import load_source
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


def load_training_examples(
    config: EmbedforgeConfig, run_dir: Path
) -> tuple[dict[str, list[TrainingExample]], dict[str, str]]:
    """Examples per source and where each source's came from ("mine" or "source")."""
    mined: dict[str, list[TrainingExample]] = {}
    folder = mined_dir(run_dir)
    if folder is not None and (folder / "data").is_dir():
        for ex in read_parquet(folder / "data", TrainingExample):
            mined.setdefault(ex.task_name, []).append(ex)
    by_name = {s.name: s for s in config.data.sources}
    examples, origin = {}, {}
    for name in stage_sources(config):
        if mined.get(name):
            examples[name], origin[name] = mined[name], "mine"
        else:
            examples[name], origin[name] = load_source(by_name[name], run_dir, config.data.seed), "source"
        if not examples[name]:
            raise ValueError(f"train: data source {name!r} gave no training examples")
        log.info("train source %s: %d examples from %s", name, len(examples[name]), origin[name])
    return examples, origin
