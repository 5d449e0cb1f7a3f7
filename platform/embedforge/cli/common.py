"""Arguments and helpers every stage subcommand shares: the config file, --run-dir and overrides."""

from __future__ import annotations

import argparse
import sys

from embedforge.config import ConfigError, EmbedforgeConfig, load_config


def add_stage_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="config YAML (see configs/)")
    parser.add_argument(
        "--run-dir",
        required=True,
        help="run directory for this stage's output: a local path or a URI (s3://, gs://) read through pyarrow.fs",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set train.stages.0.steps=10 (repeatable)",
    )


def load_or_exit(args: argparse.Namespace) -> EmbedforgeConfig | None:
    """Load the config; on error print the message and return None (callers exit 1 before any work)."""
    try:
        return load_config(args.config, getattr(args, "overrides", None))
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return None
