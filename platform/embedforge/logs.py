"""The one logging setup of every entry point: the CLI, the demo, `make gpu-check`, Ray Train workers and the
benchmarks. A successful run prints progress, not messages that read like failures: faiss logs, at INFO, that its
AVX2 build failed to import before it loads the generic build it ships (harmless on every CPU), so its loader speaks
only at WARNING; Ray Train logs every worker's every `ray.train.report` call, metrics and all, at INFO, which the
training workers' own progress lines already say, so in them it speaks only at WARNING too."""

from __future__ import annotations

import logging

QUIET = {"faiss.loader": logging.WARNING}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: int = logging.INFO, fmt: str = FORMAT, datefmt: str | None = None) -> None:
    logging.basicConfig(level=level, format=fmt, datefmt=datefmt)
    for name, quiet_level in QUIET.items():
        logging.getLogger(name).setLevel(max(quiet_level, level))


def configure_worker_logging() -> None:
    """The logging of a Ray Train worker: progress lines with time and logger, Ray Train's per-report line off."""
    from ray.train.v2._internal.execution import context  # its logger is named after the module's file

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    logging.getLogger(context.__file__).setLevel(logging.WARNING)
