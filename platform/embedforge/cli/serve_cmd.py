"""`embedforge serve CONFIG|MODEL_DIR`: serve an embedder on Ray Serve and keep it up until interrupted."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from embedforge.config import ConfigError

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="config YAML (its serve: section), or a model directory / bundled:NAME")
    parser.add_argument("--model", help="model to serve (overrides serve.model)")
    parser.add_argument(
        "--run-dir", help="pipeline run directory (a path or an s3:// or gs:// URI): serves its train/model"
    )
    parser.add_argument("--port", type=int, help="HTTP port (overrides serve.port; 0 picks a free one)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set serve.autoscaling.max_replicas=4 (repeatable)",
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="return once ready and leave the app running on the cluster (needs a running cluster)",
    )


def run(args: argparse.Namespace) -> int:
    from embedforge.cluster.local import dashboard_alive
    from embedforge.serve.deploy import deploy, load_config_for

    if args.detach and not (os.environ.get("RAY_ADDRESS") or dashboard_alive(timeout=0.5)):
        print(
            "serve error: --detach needs a running Ray cluster (RAY_ADDRESS or `embedforge cluster up`)",
            file=sys.stderr,
        )
        return 1
    is_config = args.target.endswith((".yaml", ".yml"))
    try:
        config = load_config_for(args.target, args.overrides)
    except (ConfigError, ValueError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 1
    model = args.model or (None if is_config else args.target)
    try:
        url = deploy(config, model, run_dir=args.run_dir, port=args.port)
    except (ValueError, TimeoutError) as err:
        print(f"serve error: {err}", file=sys.stderr)
        return 1
    print(url, flush=True)
    if args.detach:
        return 0
    log.info("serving at %s; Ctrl-C stops", url)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        from ray import serve

        serve.shutdown()
    return 0
