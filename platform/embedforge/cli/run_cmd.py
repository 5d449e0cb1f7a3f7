"""`embedforge run CONFIG --run-dir DIR`: the whole pipeline (synth -> mine -> train -> evaluate -> export ->
deploy) in this process, joining the job's Ray cluster; `jobs/pipeline.py` is the same command for `ray job submit`.
"""

from __future__ import annotations

import argparse
import sys

from embedforge.cli.common import add_stage_arguments, load_or_exit
from embedforge.pipeline import PipelineError, run_pipeline
from embedforge.pipeline.steps import STEP_NAMES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        choices=STEP_NAMES,
        metavar="STEP",
        help=f"leave out a step (repeatable): one of {', '.join(STEP_NAMES)}",
    )


def run(args: argparse.Namespace) -> int:
    config = load_or_exit(args)
    if config is None:
        return 1
    try:
        record = run_pipeline(config, args.run_dir, skip=args.skip, config_source=str(args.config))
    except PipelineError as err:
        print(f"embedforge run: {err}", file=sys.stderr)
        return 1
    endpoint = record["steps"].get("deploy", {}).get("endpoint")
    if endpoint:
        print(f"endpoint: {endpoint}")
    return 0
