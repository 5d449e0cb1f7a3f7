"""Load a YAML file into an EmbedforgeConfig, failing with messages that name the key and the value."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from embedforge.config.root import EmbedforgeConfig


class _ConfigYamlLoader(yaml.SafeLoader):
    """YAML 1.2's booleans: only true and false. YAML 1.1 (PyYAML's default) also reads no, yes, on and off as
    booleans, which turned a string value such as `mixed_precision: no` into false; a boolean field still takes
    them, as strings pydantic reads as booleans."""


_BOOL = "tag:yaml.org,2002:bool"
_ConfigYamlLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_ConfigYamlLoader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _read_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_ConfigYamlLoader)


class ConfigError(ValueError):
    """A config file that cannot be used; the message names the file, the key and the offending value."""


def _format_errors(source: str, err: ValidationError) -> str:
    lines = [f"{source}: {err.error_count()} problem(s)"]
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        value = e.get("input")
        shown = "" if isinstance(value, dict) else f" (got {value!r})"
        lines.append(f"  {loc}: {msg}{shown}")
    return "\n".join(lines)


def config_from_dict(data: dict[str, Any], source: str = "<config>") -> EmbedforgeConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping, got {type(data).__name__}")
    try:
        return EmbedforgeConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err)) from None


def read_config_data(path: str | Path) -> Any:
    """The raw content of config file `path`, read as every config is read (YAML 1.2 booleans), not validated."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        return _read_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None


def load_config(path: str | Path, overrides: list[str] | None = None) -> EmbedforgeConfig:
    """Read and validate `path`. `overrides` are `dotted.key=yaml_value` strings applied before validation."""
    data = read_config_data(path)
    for item in overrides or []:
        _apply_override(data, item, str(path))
    return config_from_dict(data, str(path))


def _apply_override(data: dict[str, Any], item: str, source: str) -> None:
    """Set `dotted.key=value` in the raw config; integer parts index lists (`train.stages.0.steps=10`)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError(f"{source}: override {item!r} must look like dotted.key=value")
    node: Any = data
    parts = key.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"{source}: override {item!r}: {'.'.join(parts[:depth])} has no item {part!r} (it has {len(node)})"
                )
            index: int | str = int(part)
        elif isinstance(node, dict):
            index = part
            if not last and index not in node:
                node[index] = {}
        else:
            raise ConfigError(f"{source}: override {item!r}: {'.'.join(parts[:depth])!r} is not a mapping or list")
        if last:
            node[index] = _read_yaml(raw)
        else:
            node = node[index]


def config_hash(config: EmbedforgeConfig, section: str | None = None) -> str:
    """A stable hash of the whole config, or of one section, for manifests and skip-if-complete checks."""
    payload = config.model_dump(mode="json")
    if section is not None:
        payload = payload[section]
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dump_config(config: EmbedforgeConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
