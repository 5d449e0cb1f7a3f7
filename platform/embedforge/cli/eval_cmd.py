"""`embedforge eval`: not built yet."""

from __future__ import annotations

import argparse

from embedforge.cli.common import add_stage_arguments, not_built


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_stage_arguments(parser)


def run(args: argparse.Namespace) -> int:
    return not_built("eval")
