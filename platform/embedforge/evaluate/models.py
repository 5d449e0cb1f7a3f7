"""Model references for evaluation: anything `embedforge.model.load_encoder` loads, plus HTTP endpoints.

A reference may end in `?key=value&...` to change the run's model settings for a plain backbone, e.g.
`bundled:smollm2-135m-instruct?pooling=last&bidirectional=false` (an untrained LLM with last-token pooling and
its original causal attention). Accepted keys: `pooling`, `bidirectional`, `max_query_length`,
`max_doc_length`. `http://...` / `https://...` references are evaluated through `/v1/embeddings`.
"""

from __future__ import annotations

from typing import Any

from embedforge.config.model import ModelConfig
from embedforge.model.protocol import TextEncoder

OPTIONS = ("pooling", "bidirectional", "max_query_length", "max_doc_length")


def split_reference(ref: str) -> tuple[str, dict[str, Any]]:
    """`path?pooling=last` -> ("path", {"pooling": "last"}); unknown or malformed options fail clearly."""
    if ref.startswith(("http://", "https://")):
        return ref, {}
    base, sep, query = ref.partition("?")
    options: dict[str, Any] = {}
    if not sep:
        return ref, options
    for item in query.split("&"):
        key, eq, value = item.partition("=")
        if not eq or key not in OPTIONS:
            raise ValueError(f"model reference {ref!r}: option {item!r} must be KEY=VALUE with KEY in {OPTIONS}")
        if key == "bidirectional":
            if value not in ("true", "false"):
                raise ValueError(f"model reference {ref!r}: bidirectional must be true or false, got {value!r}")
            options[key] = value == "true"
        elif key.startswith("max_"):
            if not value.isdigit():
                raise ValueError(f"model reference {ref!r}: {key} must be a positive integer, got {value!r}")
            options[key] = int(value)
        else:
            options[key] = value
    return base, options


def load_model(ref: str, model_config: ModelConfig | None = None, device: str = "cpu") -> TextEncoder:
    """The encoder behind `ref` on `device`; its `name` is the full reference, so reports tell pooling variants
    apart."""
    if ref.startswith(("http://", "https://")):
        from embedforge.evaluate.http_encoder import HTTPEncoder

        return HTTPEncoder(ref)
    from embedforge.model import load_encoder

    base, config = model_settings(ref, model_config)
    encoder = load_encoder(base, model_config=config, device=device)
    encoder.name = ref
    return encoder


def model_settings(ref: str, model_config: ModelConfig | None = None) -> tuple[str, ModelConfig]:
    """What `load_model` loads for a model reference: the path or `bundled:` name, and the model settings, which are
    `model_config` (default: `ModelConfig()`) with the reference's options applied."""
    base, options = split_reference(ref)
    config = model_config or ModelConfig()
    if options:
        config = ModelConfig.model_validate({**config.model_dump(), **options})
    return base, config
