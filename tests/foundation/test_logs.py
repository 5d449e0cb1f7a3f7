"""The one logging setup: progress at INFO, a third-party loader's harmless fallback message kept out of it."""

from __future__ import annotations

import logging
import subprocess
import sys


def test_a_successful_faiss_import_prints_nothing_under_the_logging_setup():
    code = "from embedforge.logs import configure_logging; configure_logging(); import faiss; print('imported')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "imported"
    assert "faiss" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_quiet_loggers_speak_only_at_warning_or_above():
    from embedforge.logs import QUIET, configure_logging

    configure_logging()
    for name in QUIET:
        assert not logging.getLogger(name).isEnabledFor(logging.INFO)
        assert logging.getLogger(name).isEnabledFor(logging.WARNING)
    configure_logging(logging.ERROR)  # a quieter request quiets them further
    assert all(not logging.getLogger(name).isEnabledFor(logging.WARNING) for name in QUIET)
