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

    def encode_queries(self, texts, task=None, batch_size=32, examples=()):
        self.batch_sizes.append(batch_size)
        return self.inner.encode_queries(texts, task=task, batch_size=batch_size, examples=examples)


def test_a_batch_is_encoded_in_micro_batches_with_the_same_vectors(direct_encoder):
    from embedforge.serve.service import EmbeddingService

    config = ServeConfig.model_validate({"batching": {"max_batch_size": 64, "micro_batch_size": 4}})
    recording = _RecordingEncoder(direct_encoder)
    service = EmbeddingService(recording, config)
    texts = [f"passage {i} " + "word " * (i % 7) for i in range(10)]
    try:
        vectors = service._encode(("document", None, ()), texts)
    finally:
        service.close()
    assert recording.batch_sizes == [4]
    assert np.allclose(vectors, direct_encoder.encode_documents(texts, batch_size=64), atol=1e-5)


def test_served_demonstrations_build_the_prompt_training_and_evaluation_use(tiny_model_dir):
    """LGAI 4.2 in-context examples: a request's `demonstrations` give the vector `encode_queries(examples=...)`
    gives offline (the prompt training used), and a different one than the bare query."""
    import asyncio
    import json

    from embedforge.config.model import ModelConfig
    from embedforge.model import load_embedder
    from embedforge.serve.service import EmbeddingService

    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir), pooling="mean"))
    service = EmbeddingService(embedder, ServeConfig.model_validate({"model_name": "tiny"}))
    demos = [{"query": "how tall is the eiffel tower", "document": "The Eiffel Tower is 330 m tall."}]
    body = {"model": "tiny", "input": ["how old is the louvre"], "input_type": "query", "instruction": "Find facts"}
    try:
        with_demos = service.parse(json.dumps({**body, "demonstrations": demos}).encode(), "application/json")
        bare = service.parse(json.dumps(body).encode(), "application/json")

        async def both() -> list:  # one event loop: the batcher's task lives on the loop that first submitted
            bodies = await asyncio.gather(service.embed(with_demos), service.embed(bare))
            return [json.loads(b)["data"][0]["embedding"] for b, _ in bodies]

        served = asyncio.run(both())
    finally:
        service.close()
    offline = embedder.encode_queries(
        ["how old is the louvre"], task="Find facts", examples=[(d["query"], d["document"]) for d in demos]
    )[0]
    assert float(np.dot(served[0], offline)) > 0.9999
    assert float(np.dot(served[0], served[1])) < 0.9999
