"""Fixtures shared by the synth tests."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def installed(monkeypatch) -> Callable[[ModuleType, str, Callable[[], bool]], tuple[Any, Any]]:
    """Run one of embedforge's vLLM `install_*` functions; returns (vLLM's function, ours). vLLM's own is put back
    after the test."""

    def install(module: ModuleType, name: str, install_fn: Callable[[], bool]) -> tuple[Any, Any]:
        original = getattr(module, name)
        monkeypatch.setattr(module, name, original)
        assert install_fn()
        ours = getattr(module, name)
        assert ours is not original
        return original, ours

    return install
