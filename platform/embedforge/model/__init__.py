"""The LLM embedder and the `TextEncoder` loaders (NV-Embed 3.1-3.2, MGH 2.2, LGAI 4.2)."""

from __future__ import annotations

from embedforge.model.embedder import Embedder
from embedforge.model.loading import load_embedder, load_encoder
from embedforge.model.protocol import TextEncoder
from embedforge.model.tokenization import EncodedBatch

__all__ = ["Embedder", "EncodedBatch", "TextEncoder", "load_embedder", "load_encoder"]
