"""`embedforge eval CONFIG --run-dir DIR [--model REF ...]`: evaluate embedders on MTEB-style local tasks."""

from __future__ import annotations

import argparse

from embedforge.cli.common import add_stage_arguments, load_or_exit


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        default=None,
        metavar="REF",
        help="model to evaluate (repeatable): 'trained', bundled:NAME[?pooling=last], a model folder, or an "
        "http(s) /v1/embeddings URL; default: the run's trained model plus evaluate.baselines",
    )


def run(args: argparse.Namespace) -> int:
    config = load_or_exit(args)
    if config is None:
        return 1
    from embedforge.evaluate.run import run_evaluate
    from embedforge.runs.store import staged

    with staged(args.run_dir) as run_dir:
        manifest = run_evaluate(config, run_dir, args.models)
    print(f"evaluate: report at {manifest['report']['markdown']}, ranking {manifest['ranking']}")
    return 0
