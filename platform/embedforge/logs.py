"""The one logging setup of every entry point: the CLI, the demo, `make gpu-check`, Ray Train workers and the
benchmarks. A successful run prints progress, not messages that read like failures: faiss logs, at INFO, that its
AVX2 build failed to import before it loads the generic build it ships (harmless on every CPU), so its loader speaks
only at WARNING."""

from __future__ import annotations

import logging

QUIET = {"faiss.loader": logging.WARNING}
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: int = logging.INFO, fmt: str = FORMAT, datefmt: str | None = None) -> None:
    logging.basicConfig(level=level, format=fmt, datefmt=datefmt)
    for name, quiet_level in QUIET.items():
        logging.getLogger(name).setLevel(max(quiet_level, level))
