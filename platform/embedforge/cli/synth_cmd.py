"""`embedforge synth`: synthetic training data from a vLLM-hosted LLM in Ray Data (two-step or corpus-grounded)."""

from __future__ import annotations

import argparse
import json

from embedforge.cli.common import add_stage_arguments, load_or_exit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)
    parser.add_argument(
        "--documents",
        default=None,
        metavar="PATH",
        help="corpus-grounded mode: the user's documents (JSONL, Parquet or a folder of .txt); sets synth.documents",
    )


def run(args: argparse.Namespace) -> int:
    if args.documents:
        args.overrides = [*args.overrides, f"synth.documents={args.documents}"]
    config = load_or_exit(args)
    if config is None:
        return 1
    if not config.synth.enabled:
        print("synth: disabled in the config (synth.enabled: false); nothing to do")
        return 0
    from embedforge.runs.store import staged
    from embedforge.synth.run import run_synth

    with staged(args.run_dir) as run_dir:
        manifest = run_synth(config, run_dir)
    summary = {k: manifest.get(k) for k in ("counts", "drops", "judge", "throughput", "heldout") if k in manifest}
    print(json.dumps({"stage": "synth", "run_dir": str(args.run_dir), **summary}))
    return 0
