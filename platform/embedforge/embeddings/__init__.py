"""Embedding cache shared by mining and evaluation (see `embedforge.embeddings.cache`)."""

from embedforge.embeddings.cache import EmbeddingCache, encoder_identity, text_key

__all__ = ["EmbeddingCache", "encoder_identity", "text_key"]
