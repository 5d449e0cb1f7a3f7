"""`embedforge models prepare|list`: materialise bundled models into the cache, once, offline."""

from __future__ import annotations

import argparse

from embedforge.models.bundled import BUNDLED, prepare
from embedforge.paths import models_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    p = sub.add_parser("prepare", help="prepare bundled models (all by default)")
    p.add_argument("names", nargs="*", choices=[*BUNDLED, []], metavar="NAME", help=f"any of {sorted(BUNDLED)}")
    p.add_argument("--force", action="store_true", help="prepare again even if already prepared")
    sub.add_parser("list", help="list bundled models and whether they are prepared")


def run(args: argparse.Namespace) -> int:
    if args.action == "prepare":
        for name, path in prepare(args.names or None, force=args.force).items():
            print(f"{name}\t{path}")
        return 0
    for name in BUNDLED:
        path = models_dir() / name
        state = "prepared" if (path / ".complete").is_file() else "missing"
        print(f"bundled:{name}\t{state}\t{path}")
    return 0
