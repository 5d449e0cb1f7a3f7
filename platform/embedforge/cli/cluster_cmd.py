"""`embedforge cluster up|down|status|smoke`: the local Ray head (dashboard on 127.0.0.1:8265) and a smoke job."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from embedforge.cluster import local


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start the local head (idempotent)")
    up.add_argument("--num-cpus", type=int, default=None)
    sub.add_parser("down", help="stop the local head (only its own processes)")
    sub.add_parser("status", help="print `ray status` for the local head")
    smoke = sub.add_parser("smoke", help="convert a shared dataset with Ray Data into run-dir/smoke/ (the smoke job)")
    smoke.add_argument("--run-dir", required=True, type=Path)
    smoke.add_argument("--dataset", default="stsb", help="a shared dataset of family sts, pair, nli or reranking")
    smoke.add_argument("--split", default=None)


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        print(f"dashboard: {local.up(args.num_cpus)}")
        return 0
    if args.action == "down":
        print(f"stopped {local.down()} Ray head processes")
        return 0
    if args.action == "smoke":
        from embedforge.cluster.smoke import run_smoke

        manifest = run_smoke(args.run_dir.resolve(), args.dataset, args.split)
        print(json.dumps({k: manifest.get(k) for k in ("status", "counts", "timings")}, indent=2))
        return 0 if manifest.get("status") == "complete" else 1
    return local.status()
