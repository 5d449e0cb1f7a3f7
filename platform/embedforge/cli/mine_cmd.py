"""`embedforge mine`: hard-negative mining with teachers, faiss and positive-aware selection (Ray Data)."""

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
    if not config.mine.enabled:
        print("mine: disabled in the config (mine.enabled: false); nothing to do")
        return 0
    from embedforge.mine.run import run_mine
    from embedforge.runs.store import staged

    with staged(args.run_dir) as run_dir:
        manifest = run_mine(config, run_dir)
    print(json.dumps({"stage": "mine", "run_dir": str(args.run_dir), "counts": manifest.get("counts", {})}))
    return 0
