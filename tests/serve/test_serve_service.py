"""The embedding service's encode step with the real MiniLM model (no HTTP)."""

from __future__ import annotations

import numpy as np

from embedforge.config.serve import ServeConfig


class _RecordingEncoder:
    """The real encoder, recording the batch size each call asks for."""

    def __init__(self, encoder) -> None:
        self.inner, self.batch_sizes = encoder, []
        self.name, self.dimension, self.tokenizer = encoder.name, encoder.dimension, encoder.tokenizer

    def encode_documents(self, texts, task=None, batch_size=32):
        self.batch_sizes.append(batch_size)
        return self.inner.encode_documents(texts, task=task, batch_size=batch_size)

    def encode_queries(self, texts, task=None, batch_size=32):
        self.batch_sizes.append(batch_size)
        return self.inner.encode_queries(texts, task=task, batch_size=batch_size)


def test_a_batch_is_encoded_in_micro_batches_with_the_same_vectors(direct_encoder):
    from embedforge.serve.service import EmbeddingService

    config = ServeConfig.model_validate({"batching": {"max_batch_size": 64, "micro_batch_size": 4}})
    recording = _RecordingEncoder(direct_encoder)
    service = EmbeddingService(recording, config)
    texts = [f"passage {i} " + "word " * (i % 7) for i in range(10)]
    try:
        vectors = service._encode(("document", None), texts)
    finally:
        service.close()
    assert recording.batch_sizes == [4]
    assert np.allclose(vectors, direct_encoder.encode_documents(texts, batch_size=64), atol=1e-5)
