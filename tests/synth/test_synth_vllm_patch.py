"""A vLLM function is replaced once (installing again does not wrap the wrapper), and a vLLM without the function
keeps its own code with a warning."""

from __future__ import annotations

import logging
import types

from embedforge.synth.vllm_patch import replace_function


def _module() -> types.ModuleType:
    module = types.ModuleType("fake_vllm_sampler")
    module.double = lambda x: 2 * x  # type: ignore[attr-defined]
    return module


def test_replaces_once_and_calls_through():
    module = _module()
    calls: list[int] = []

    def wrap(original):
        def plus_one(x):
            calls.append(x)
            return original(x) + 1

        return plus_one

    assert replace_function(module, "double", wrap, "unused")
    installed = module.double
    assert installed(3) == 7 and calls == [3]
    assert replace_function(module, "double", wrap, "unused")
    assert module.double is installed  # not wrapped twice
    assert module.double(1) == 3


def test_a_missing_function_is_left_to_vllm_with_a_warning(caplog):
    module = _module()
    with caplog.at_level(logging.WARNING):
        assert not replace_function(module, "apply_top_k_top_p", lambda f: f, "top-p keeps vLLM's sort")
    assert "no `fake_vllm_sampler.apply_top_k_top_p`: top-p keeps vLLM's sort" in caplog.text
    assert not hasattr(module, "apply_top_k_top_p")
