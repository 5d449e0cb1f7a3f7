"""The LLM embedder and the `TextEncoder` loaders (NV-Embed 3.1-3.2, MGH 2.2, LGAI 4.2).

The names are loaded on first use (PEP 562): a process that only needs a light submodule (`protocol`, a driver
that hands models to Ray actors) never imports torch and transformers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from embedforge.model.embedder import Embedder
    from embedforge.model.loading import load_embedder, load_encoder
    from embedforge.model.protocol import TextEncoder
    from embedforge.model.tokenization import EncodedBatch

__all__ = ["Embedder", "EncodedBatch", "TextEncoder", "load_embedder", "load_encoder"]
_HOMES = {
    "Embedder": "embedder",
    "EncodedBatch": "tokenization",
    "TextEncoder": "protocol",
    "load_embedder": "loading",
    "load_encoder": "loading",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"embedforge.model.{_HOMES[name]}"), name)
