"""Prometheus metrics of the embedding endpoint, exported through Ray's metrics agent next to Serve's own.

Names (Ray prefixes them with `ray_`). The gateway counts what clients see: `embedforge_requests_total{status}`,
`embedforge_tokens_total`, `embedforge_request_latency_ms`, `embedforge_request_retries_total` (tries repeated
because a replica died). Model replicas count their batches: `embedforge_batch_size`, `embedforge_batch_tokens`,
`embedforge_batch_latency_ms`. Serve's own `serve_*` metrics (queue lengths, replica counts) come for free.
"""

from __future__ import annotations

from ray.serve import metrics

_LATENCY_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
_TOKENS = [16, 64, 256, 1024, 4096, 16384, 65536]


class RequestMetrics:
    def __init__(self) -> None:
        self.requests = metrics.Counter(
            "embedforge_requests_total", description="embedding requests by HTTP status", tag_keys=("status",)
        )
        self.tokens = metrics.Counter("embedforge_tokens_total", description="input tokens embedded")
        self.retries = metrics.Counter(
            "embedforge_request_retries_total", description="tries repeated on another replica after a replica died"
        )
        self.request_latency = metrics.Histogram(
            "embedforge_request_latency_ms", description="request latency in the gateway", boundaries=_LATENCY_MS
        )

    def request(self, status: int, seconds: float, tokens: int, retries: int = 0) -> None:
        self.requests.inc(tags={"status": str(status)})
        self.request_latency.observe(seconds * 1000.0)
        if tokens:
            self.tokens.inc(tokens)
        if retries:
            self.retries.inc(retries)


class BatchMetrics:
    def __init__(self) -> None:
        self.batch_size = metrics.Histogram(
            "embedforge_batch_size", description="texts per encoded batch", boundaries=_SIZES
        )
        self.batch_tokens = metrics.Histogram(
            "embedforge_batch_tokens", description="padded tokens per encoded batch", boundaries=_TOKENS
        )
        self.batch_latency = metrics.Histogram(
            "embedforge_batch_latency_ms", description="model time per batch", boundaries=_LATENCY_MS
        )

    def batch(self, texts: int, padded_tokens: int, seconds: float) -> None:
        self.batch_size.observe(texts)
        self.batch_tokens.observe(padded_tokens)
        self.batch_latency.observe(seconds * 1000.0)
