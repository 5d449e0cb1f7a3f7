"""`embedforge config check FILE`: validate and print the resolved config, exit 1 with the message on error."""

from __future__ import annotations

import argparse
import sys

from embedforge.config import ConfigError, config_hash, dump_config, load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    check = sub.add_parser("check", help="validate a config and print it resolved")
    check.add_argument("file")
    check.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.file, args.overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 1
    print(f"# {args.file}: valid (hash {config_hash(config)})")
    print(dump_config(config), end="")
    return 0
