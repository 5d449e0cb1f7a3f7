"""`embedforge train`: distributed LoRA contrastive training on Ray Train (two stages, checkpoints, export)."""

from __future__ import annotations

import argparse
import json

from embedforge.cli.common import add_stage_arguments, load_or_exit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)


def run(args: argparse.Namespace) -> int:
    config = load_or_exit(args)
    if config is None:
        return 1
    if not config.train.enabled:
        print("train: disabled in the config (train.enabled: false); nothing to do")
        return 0
    from embedforge.runs.store import staged
    from embedforge.train.run import run_train

    try:
        with staged(args.run_dir) as run_dir:
            manifest = run_train(config, run_dir)
    except ValueError as err:
        print(f"train: {err}")
        return 1
    summary = {
        "stage": "train",
        "run_dir": str(args.run_dir),
        "counts": manifest.get("counts", {}),
        "outputs": manifest.get("outputs", {}),
    }
    print(json.dumps(summary))
    return 0
