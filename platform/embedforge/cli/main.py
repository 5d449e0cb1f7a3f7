"""`embedforge`: one command, a subcommand per stage. Each stage's subcommand lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from embedforge.logs import configure_logging

# subcommand -> module in embedforge.cli that defines `add_arguments(parser)` and `run(args) -> int`
SUBCOMMANDS = {
    "models": "Prepare the bundled real models and the tiny test model (no network).",
    "cluster": "Start, stop or inspect the local Ray head with its dashboard.",
    "config": "Validate a config file and print it resolved.",
    "synth": "Synthesize training data with a vLLM-hosted LLM (Ray Data).",
    "mine": "Mine hard negatives with teacher models and faiss (Ray Data).",
    "train": "Train the LLM embedder with LoRA contrastive learning (Ray Train).",
    "eval": "Evaluate embedders on MTEB-style tasks from local data (Ray).",
    "serve": "Serve an embedder with an OpenAI-style /v1/embeddings API (Ray Serve).",
    "run": "Run the whole pipeline: synth -> mine -> train -> eval -> export -> serve.",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="embedforge", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_text in SUBCOMMANDS.items():
        module = importlib.import_module(f"embedforge.cli.{name}_cmd")
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


# what a user's input can get wrong (a config value, a path, a data file, an empty run dir): one `error:` line and
# exit 2, the traceback only with --verbose; anything else is a bug and keeps its traceback
USER_ERRORS = (ValueError, FileNotFoundError, NotADirectoryError, PermissionError)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose else logging.INFO, datefmt="%H:%M:%S")
    try:
        return int(args._module.run(args) or 0)
    except USER_ERRORS as err:
        if args.verbose:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
