"""`embedforge cluster up|down|status`: the local Ray head with its dashboard on 127.0.0.1:8265."""

from __future__ import annotations

import argparse

from embedforge.cluster import local


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start the local head (idempotent)")
    up.add_argument("--num-cpus", type=int, default=None)
    sub.add_parser("down", help="stop the local head")
    sub.add_parser("status", help="print `ray status`")


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        print(f"dashboard: {local.up(args.num_cpus)}")
        return 0
    if args.action == "down":
        local.down()
        return 0
    return local.status()
