"""embedforge: turn decoder-only LLMs into generalist text embedders, on Ray, and serve them."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "load_embedder"]


def load_embedder(source: Any, **kwargs: Any) -> Any:
    """Load an embedder from a model directory or a config file (see `embedforge.model.load_embedder`)."""
    from embedforge.model import load_embedder as _load

    return _load(source, **kwargs)
