"""A `TextEncoder` that calls an OpenAI-style `/v1/embeddings` endpoint, so a served model is evaluated as served.

Requests carry embedforge's extensions (see `embedforge.serve.request`): `input_type` ("query" or "document"),
`instruction` (the task instruction of NV-Embed section 4 / Table 13), `demonstrations` (LGAI 4.2 in-context
examples, queries only) and `truncate`. Only the standard
OpenAI response shape is read (`data[i].embedding` ordered by `data[i].index`).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from embedforge.model.protocol import Demonstration

ENDPOINT_PATH = "/v1/embeddings"


class HTTPEncoder:
    """Embeds texts through `<base_url>/v1/embeddings`; `url` may be the base or the full endpoint URL."""

    def __init__(self, url: str, model: str | None = None, api_key: str | None = None, timeout_s: float = 120.0):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"HTTP encoder needs an http(s) URL, got {url!r}")
        base = url.rstrip("/")
        self.url = base if base.endswith(ENDPOINT_PATH) else base + ENDPOINT_PATH
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("EMBEDFORGE_API_KEY")
        self.timeout_s = timeout_s
        self.name = url
        self._dimension: int | None = None

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = int(self._post(["dimension probe"], "document", None).shape[1])
        return self._dimension

    def encode_queries(
        self,
        texts: Sequence[str],
        task: str | None = None,
        batch_size: int = 32,
        examples: Sequence[Demonstration] = (),
    ) -> np.ndarray:
        return self._encode(texts, "query", task, batch_size, examples)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        return self._encode(texts, "document", task, batch_size, ())

    def _encode(
        self,
        texts: Sequence[str],
        input_type: str,
        task: str | None,
        batch_size: int,
        examples: Sequence[Demonstration],
    ) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = [
            self._post(list(texts[i : i + batch_size]), input_type, task, examples)
            for i in range(0, len(texts), batch_size)
        ]
        out = np.concatenate(parts).astype(np.float32)
        self._dimension = out.shape[1]
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    def _post(
        self, texts: list[str], input_type: str, task: str | None, examples: Sequence[Demonstration] = ()
    ) -> np.ndarray:
        # truncate (TEI's convention): a long evaluation text is embedded from its first tokens, as the offline
        # encoder embeds it, rather than failing the task
        payload: dict[str, Any] = {
            "input": texts,
            "input_type": input_type,
            "encoding_format": "float",
            "truncate": True,
        }
        if self.model:
            payload["model"] = self.model
        if task:
            payload["instruction"] = task
        if examples:
            payload["demonstrations"] = [{"query": q, "document": d} for q, d in examples]
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, json.dumps(payload).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                body = json.loads(resp.read())
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:500]
            raise RuntimeError(f"{self.url} answered HTTP {err.code}: {detail}") from None
        except urllib.error.URLError as err:
            raise ConnectionError(f"cannot reach {self.url}: {err.reason}") from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != len(texts):
            raise RuntimeError(f"{self.url}: expected 'data' with {len(texts)} embeddings, got {str(body)[:200]}")
        ordered = sorted(data, key=lambda item: item["index"])
        return np.asarray([item["embedding"] for item in ordered], dtype=np.float32)
