"""The embedding service without HTTP: checks a request, batches it, encodes it, renders the OpenAI response.

Query vs document encoding goes through the model's own `encode_queries` / `encode_documents`, so the served
instruction template and pooling are the trained ones (NV-Embed, seed 000, section 4). `dimensions` keeps the
first d coordinates and renormalises them (`embeddings/matryoshka.py`; OpenAI's `dimensions` parameter).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Hashable
from typing import Any

import numpy as np
import orjson

from embedforge.config.serve import ServeConfig
from embedforge.embeddings.matryoshka import truncate_dimensions
from embedforge.model.protocol import TextEncoder
from embedforge.serve.batcher import BatchObserver, TokenBudgetBatcher
from embedforge.serve.errors import APIError
from embedforge.serve.request import EmbeddingRequest, TokenIds, parse_request, read_json_body
from embedforge.serve.tokens import TokenLimiter

log = logging.getLogger(__name__)


def tokenizer_of(encoder: TextEncoder) -> Any:
    tokenizer = getattr(encoder, "tokenizer", None)
    if tokenizer is None:
        raise TypeError(
            f"encoder {encoder.name!r} ({type(encoder).__name__}) exposes no `tokenizer`; serving "
            "needs it to count and limit tokens"
        )
    return tokenizer


class EmbeddingService:
    def __init__(self, encoder: TextEncoder, config: ServeConfig, observe_batch: BatchObserver | None = None):
        self.encoder = encoder
        self.config = config
        self.dimension = encoder.dimension
        limits = config.limits
        self.limiter = TokenLimiter(tokenizer_of(encoder), limits.max_tokens_per_input)
        batching = config.batching
        self.batcher = TokenBudgetBatcher(
            self._encode,
            max_batch_tokens=batching.max_batch_tokens,
            max_batch_size=batching.max_batch_size,
            wait_s=batching.batch_wait_timeout_s,
            max_pending=batching.max_pending_requests,
            observe=observe_batch,
        )

    def _encode(self, key: Hashable, texts: list[str]) -> np.ndarray:
        input_type, instruction, demonstrations = key  # type: ignore[misc]
        size = self.config.batching.micro_batch_size
        if input_type == "query":
            vectors = self.encoder.encode_queries(texts, task=instruction, batch_size=size, examples=demonstrations)
        else:
            vectors = self.encoder.encode_documents(texts, task=instruction, batch_size=size)
        return np.asarray(vectors, dtype=np.float32)

    def parse(self, raw: bytes, content_type: str | None) -> EmbeddingRequest:
        payload = read_json_body(raw, content_type, self.config.limits.max_body_bytes)
        return parse_request(
            payload,
            model_name=self.config.model_name,
            dimension=self.dimension,
            default_input_type=self.config.default_input_type,
            limits=self.config.limits,
        )

    def as_texts(self, inputs: list[str | TokenIds]) -> list[str]:
        """Token-id inputs decoded with the served model's tokenizer (the text they encode, which embeds exactly as
        that text when the ids are the tokenizer's own encoding of it); ids outside its vocabulary are a 422."""
        tokenizer = self.limiter.tokenizer
        vocabulary = len(tokenizer)
        texts = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                texts.append(item)
                continue
            where = "input" if len(inputs) == 1 else f"input[{i}]"
            unknown = next((token for token in item if token >= vocabulary), None)
            if unknown is not None:
                raise APIError(
                    422,
                    f"`{where}` holds token id {unknown}; the model's vocabulary has ids 0-{vocabulary - 1}",
                    "input",
                )
            text = tokenizer.decode(list(item))
            if not text.strip():
                raise APIError(422, f"`{where}` decodes to empty text", "input")
            texts.append(text)
        return texts

    async def embed(self, request: EmbeddingRequest) -> tuple[bytes, int]:
        """The response body (JSON bytes) and the number of input tokens."""
        texts, counts = self.limiter.apply(self.as_texts(request.texts), request.truncate)
        key = (request.input_type, request.instruction, request.demonstrations)
        vectors = await self.batcher.submit(key, texts, counts)
        vectors = truncate_dimensions(vectors, request.dimensions)
        tokens = int(sum(counts))
        body = {
            "object": "list",
            "data": [
                {"object": "embedding", "index": i, "embedding": _render(v, request.encoding_format)}
                for i, v in enumerate(vectors)
            ],
            "model": request.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), tokens

    def models(self) -> dict:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.config.model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "embedforge",
                    "dimension": self.dimension,
                }
            ],
        }

    def close(self) -> None:
        self.batcher.close()


def _render(vector: np.ndarray, encoding_format: str) -> Any:
    """A vector as the response carries it: base64 of little-endian float32, or the float32 array itself, which
    orjson writes as the shortest decimals that read back to the same float32 (about 20 times faster than
    json.dumps of Python floats, whose 17-digit doubles also make the body 1.7 times larger: a replica of a
    4096-dimension model spent a third of its time rendering, benchmarks/results/gpu.json)."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return np.ascontiguousarray(vector, dtype=np.float32)
