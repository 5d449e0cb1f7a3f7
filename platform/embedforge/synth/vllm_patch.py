"""Replacing one of vLLM's sampling functions in this process, once, for the CPU paths in `top_p.py` and
`penalties.py`. A vLLM without the function (another version) keeps its own code, with a warning."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

log = logging.getLogger(__name__)

MARK = "embedforge_patch"


def replace_function(module: ModuleType, name: str, wrap: Callable[[Any], Any], fallback: str) -> bool:
    """Set `module.name` to `wrap(original)` unless it is already ours; returns whether ours is installed.
    `fallback` says what vLLM does instead when the function is missing."""
    current = getattr(module, name, None)
    if current is None:
        log.warning("this vLLM has no `%s.%s`: %s", module.__name__, name, fallback)
        return False
    if getattr(current, MARK, False):
        return True
    replacement = wrap(current)
    setattr(replacement, MARK, True)
    setattr(module, name, replacement)
    return True
