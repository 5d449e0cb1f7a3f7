"""Parse and check one `/v1/embeddings` request body (OpenAI embeddings API plus two retrieval extensions).

`input` is a string, a list of strings, or token ids of the served model's own tokenizer (a list of integers, or
a list of such lists), as vLLM's OpenAI server takes them; the service decodes ids with that tokenizer.

Extensions: `input_type` ("query" or "document"), `instruction`, `demonstrations` (LGAI-Embedding 4.2 in-context
examples for queries: a list of `{"query": ..., "document": ...}` placed before the instruction, as training placed
them), and `truncate` (TEI's convention: a too-long input is an error unless the request sets it true;
`serve.limits.on_too_long` is the default). Queries get the
trained instruction template (NV-Embed, seed 000, section 4: `Instruct: {task}\\nQuery: `); documents are bare
unless an instruction is given, which marks a symmetric task (STS, clustering) where both sides carry it.

Statuses: 400 the body cannot be read (invalid UTF-8 or JSON), 413 something is over a size limit, 415 the body
is not JSON, 422 the JSON is readable but a field is wrong, 404 an unknown model. Every message names the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from embedforge.config.serve import LimitsConfig
from embedforge.serve.errors import APIError

KNOWN_FIELDS = (
    "input",
    "model",
    "encoding_format",
    "dimensions",
    "user",
    "input_type",
    "instruction",
    "truncate",
    "demonstrations",
)
MAX_INSTRUCTION_CHARS = 2048
MAX_DEMONSTRATIONS = 16
MAX_DEMONSTRATION_CHARS = 8192  # all demonstrations of a request together

InputType = Literal["query", "document"]
TokenIds = tuple[int, ...]  # one input given as the served model's token ids
EncodingFormat = Literal["float", "base64"]


@dataclass(frozen=True)
class EmbeddingRequest:
    texts: list[str | TokenIds]
    model: str
    encoding_format: EncodingFormat
    dimensions: int | None
    input_type: InputType
    instruction: str | None
    truncate: bool
    demonstrations: tuple[tuple[str, str], ...] = ()


def read_json_body(raw: bytes, content_type: str | None, max_body_bytes: int) -> dict[str, Any]:
    """Bytes to a JSON object, or an APIError saying why not."""
    media_type = (content_type or "").split(";")[0].strip().lower()
    if media_type != "application/json":
        raise APIError(415, f"Content-Type must be application/json, got {content_type or 'none'!r}", "body")
    if len(raw) > max_body_bytes:
        raise APIError(413, f"body is {len(raw)} bytes, the limit is {max_body_bytes}", "body")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise APIError(400, f"body is not valid UTF-8 (bad byte at offset {err.start})", "body") from None
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as err:
        raise APIError(
            400, f"body is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", "body"
        ) from None
    except RecursionError:
        raise APIError(400, "body is not readable: its arrays or objects are nested too deeply", "body") from None
    except ValueError as err:  # an integer literal over Python's digit limit
        raise APIError(400, f"body is not readable: {err}", "body") from None
    if not isinstance(payload, dict):
        raise APIError(422, f"body must be a JSON object, got {_json_type(payload)}", "body")
    return payload


def parse_request(
    payload: dict[str, Any],
    *,
    model_name: str,
    dimension: int,
    default_input_type: InputType,
    limits: LimitsConfig,
) -> EmbeddingRequest:
    unknown = sorted(set(payload) - set(KNOWN_FIELDS))
    if unknown:
        raise APIError(422, f"unknown field {unknown[0]!r} (known fields: {', '.join(KNOWN_FIELDS)})", unknown[0])
    model = payload.get("model")
    if model is None:
        raise APIError(422, "`model` is required", "model")
    if not isinstance(model, str):
        raise APIError(422, f"`model` must be a string, got {_json_type(model)}", "model")
    if model != model_name:
        raise APIError(
            404, f"model {model[:100]!r} not found; this endpoint serves {model_name!r}", "model", "model_not_found"
        )
    truncate = payload.get("truncate")
    if truncate is None:
        truncate = limits.on_too_long == "truncate"
    elif not isinstance(truncate, bool):
        raise APIError(422, f"`truncate` must be true or false, got {_json_type(truncate)}", "truncate")
    texts = _texts(payload.get("input"), "input" in payload, limits, truncate)
    encoding_format = payload.get("encoding_format")
    encoding_format = "float" if encoding_format is None else encoding_format
    if encoding_format not in ("float", "base64"):
        raise APIError(
            422, f"`encoding_format` must be 'float' or 'base64', got {_short(encoding_format)}", "encoding_format"
        )
    dimensions = payload.get("dimensions")
    if dimensions is not None:
        if not isinstance(dimensions, int) or isinstance(dimensions, bool):
            raise APIError(422, f"`dimensions` must be an integer, got {_json_type(dimensions)}", "dimensions")
        if not 1 <= dimensions <= dimension:
            raise APIError(422, f"`dimensions` must be between 1 and {dimension}, got {dimensions}", "dimensions")
    input_type = payload.get("input_type")
    input_type = default_input_type if input_type is None else input_type
    if input_type not in ("query", "document"):
        raise APIError(422, f"`input_type` must be 'query' or 'document', got {_short(input_type)}", "input_type")
    instruction = payload.get("instruction")
    if instruction is not None:
        if not isinstance(instruction, str) or not instruction.strip():
            raise APIError(422, "`instruction` must be a non-empty string", "instruction")
        if len(instruction) > MAX_INSTRUCTION_CHARS:
            raise APIError(
                413,
                f"`instruction` has {len(instruction)} characters, the limit is {MAX_INSTRUCTION_CHARS}",
                "instruction",
            )
        _check_encodable(instruction, "instruction", "instruction")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise APIError(422, f"`user` must be a string, got {_json_type(user)}", "user")
    demonstrations = _demonstrations(payload.get("demonstrations"), input_type)
    return EmbeddingRequest(
        texts, model, encoding_format, dimensions, input_type, instruction, truncate, demonstrations
    )


def _demonstrations(value: Any, input_type: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if input_type != "query":
        raise APIError(422, "`demonstrations` apply to queries: send them with input_type 'query'", "demonstrations")
    if not isinstance(value, list):
        raise APIError(422, f"`demonstrations` must be a list of objects, got {_json_type(value)}", "demonstrations")
    if len(value) > MAX_DEMONSTRATIONS:
        raise APIError(
            413, f"`demonstrations` has {len(value)} items, the limit is {MAX_DEMONSTRATIONS}", "demonstrations"
        )
    out = []
    for i, item in enumerate(value):
        where = f"demonstrations[{i}]"
        if not isinstance(item, dict) or set(item) != {"query", "document"}:
            raise APIError(422, f"`{where}` must be an object with exactly `query` and `document`", "demonstrations")
        for key in ("query", "document"):
            text = item[key]
            if not isinstance(text, str) or not text.strip():
                raise APIError(422, f"`{where}.{key}` must be a non-empty string", "demonstrations")
            _check_encodable(text, f"{where}.{key}", "demonstrations")
        out.append((item["query"], item["document"]))
    chars = sum(len(q) + len(d) for q, d in out)
    if chars > MAX_DEMONSTRATION_CHARS:
        raise APIError(
            413, f"`demonstrations` have {chars} characters, the limit is {MAX_DEMONSTRATION_CHARS}", "demonstrations"
        )
    return tuple(out)


def _texts(value: Any, present: bool, limits: LimitsConfig, truncate: bool) -> list[str | TokenIds]:
    if not present:
        raise APIError(422, "`input` is required", "input")
    if isinstance(value, str):
        items: list[Any] = [value]
    elif isinstance(value, list):
        items = value
    else:
        raise APIError(
            422, f"`input` must be a string, a list of strings or token ids, got {_json_type(value)}", "input"
        )
    if not items:
        raise APIError(422, "`input` must not be an empty list", "input")
    if all(_is_int(item) for item in items):  # one input as token ids
        return [_token_ids(items, "input", limits)]
    if len(items) > limits.max_inputs:
        raise APIError(413, f"`input` has {len(items)} items, the limit is {limits.max_inputs}", "input")
    kinds = {list if isinstance(item, list) else str for item in items}
    if len(kinds) > 1:
        raise APIError(422, "`input` mixes texts and token-id lists: send one kind per request", "input")
    texts: list[str | TokenIds] = []
    for i, item in enumerate(items):
        where = "input" if isinstance(value, str) else f"input[{i}]"
        if isinstance(item, list):
            texts.append(_token_ids(item, where, limits))
            continue
        if not isinstance(item, str):
            raise APIError(422, f"`{where}` must be a string, got {_json_type(item)}", "input")
        if not item.strip():
            raise APIError(422, f"`{where}` is empty or only whitespace", "input")
        _check_encodable(item, where, "input")
        if len(item) > limits.max_chars_per_input:
            if not truncate:
                raise APIError(
                    413, f"`{where}` has {len(item)} characters, the limit is {limits.max_chars_per_input}", "input"
                )
            item = item[: limits.max_chars_per_input]
        texts.append(item)
    return texts


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_ids(items: list[Any], where: str, limits: LimitsConfig) -> TokenIds:
    """One input's token ids: non-negative integers, at most the per-input token limit (the vocabulary range is the
    service's check, which knows the tokenizer)."""
    if not items:
        raise APIError(422, f"`{where}` is an empty list of token ids", "input")
    for j, token in enumerate(items):
        if not _is_int(token):
            raise APIError(422, f"`{where}[{j}]` must be a token id (an integer), got {_json_type(token)}", "input")
        if token < 0:
            raise APIError(422, f"`{where}[{j}]` is {token}: token ids are not negative", "input")
    if len(items) > limits.max_tokens_per_input:
        raise APIError(
            413, f"`{where}` has {len(items)} token ids, the limit is {limits.max_tokens_per_input}", "input"
        )
    return tuple(items)


def _check_encodable(text: str, where: str, param: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise APIError(422, f"`{where}` contains an unpaired surrogate at position {err.start}", param) from None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), type(value).__name__
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
