"""Save and load embedforge model folders.

Layout of a folder written by `save_embedder`:
- `embedforge.json`: format version, the model config section, the base backbone reference, weight kind;
- `tokenizer/`: the tokenizer;
- `adapter/` (LoRA adapters, base weights come from `backbone_ref`) or `backbone/` (full HF checkpoint);
- `pooling.safetensors`: the pooling head's weights when it has any (latent attention);
- `document_backbone/` (`model.frozen_documents`): the starting model's backbone that encodes documents.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from embedforge.cluster.device import inference_dtype
from embedforge.config.model import ModelConfig
from embedforge.model.backbone import load_backbone, load_tokenizer
from embedforge.model.backbone_spec import read_backbone_spec, resolve_model_config
from embedforge.model.embedder import Embedder
from embedforge.model.lora import is_peft
from embedforge.model.pooling import build_pooling
from embedforge.models.bundled import resolve_model

log = logging.getLogger(__name__)
MANIFEST = "embedforge.json"
FORMAT_VERSION = 1
DOCUMENT_BACKBONE = "document_backbone"


def is_embedforge_dir(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def write_folder(embedder: Embedder, directory: Path, backbone: Any, extra: dict | None = None) -> Path:
    """Write `backbone` (plain or peft) with the embedder's tokenizer, pooling head and config into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    adapter = is_peft(backbone)
    if adapter:
        backbone.save_pretrained(directory / "adapter")
    else:
        backbone.save_pretrained(directory / "backbone", safe_serialization=True)
    if embedder.document_backbone is not None:
        embedder.document_backbone.save_pretrained(directory / DOCUMENT_BACKBONE, safe_serialization=True)
    embedder.tokenizer.save_pretrained(directory / "tokenizer")
    state = {k: v.detach().cpu().contiguous() for k, v in embedder.pooling.state_dict().items()}
    if state:
        save_file(state, str(directory / "pooling.safetensors"))
    manifest = {
        "format_version": FORMAT_VERSION,
        "name": embedder.name,
        "weights": "adapter" if adapter else "full",
        "backbone_ref": embedder.backbone_ref,
        "model": embedder.config.model_dump(mode="json"),
        **(extra or {}),
    }
    (directory / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    log.info("saved %s embedder (%s weights) to %s", embedder.name, manifest["weights"], directory)
    return directory


def save_embedder(embedder: Embedder, directory: Path) -> Path:
    return write_folder(embedder, directory, embedder.backbone)


def read_manifest(directory: Path) -> dict[str, Any]:
    manifest = json.loads((directory / MANIFEST).read_text())
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(f"{directory / MANIFEST}: unsupported format_version {version!r} (expected {FORMAT_VERSION})")
    return manifest


def load_saved(directory: Path, trainable: bool = False, device: str = "cpu") -> Embedder:
    """Load a folder written by `save_embedder` / merged export, in the dtype its config gives on `device`;
    adapters stay trainable only if asked."""
    manifest = read_manifest(directory)
    full = manifest["weights"] == "full"
    spec = read_backbone_spec(directory / "backbone" if full else resolve_model(manifest["backbone_ref"]))
    config = resolve_model_config(ModelConfig.model_validate(manifest["model"]), spec)
    backbone = load_backbone(spec, inference_dtype(config.dtype, device), config.bidirectional)
    if not full:
        from peft import PeftModel

        backbone = PeftModel.from_pretrained(backbone, directory / "adapter", is_trainable=trainable)
    pooling = build_pooling(config, backbone.config.hidden_size)
    if (directory / "pooling.safetensors").is_file():
        pooling.load_state_dict(load_file(str(directory / "pooling.safetensors")))
    documents = None
    if config.frozen_documents:
        documents_spec = read_backbone_spec(directory / DOCUMENT_BACKBONE)
        documents = load_backbone(documents_spec, inference_dtype(config.dtype, device), config.bidirectional)
    return Embedder(
        backbone,
        load_tokenizer(directory / "tokenizer"),
        config,
        pooling,
        name=manifest.get("name") or directory.name,
        backbone_ref=manifest["backbone_ref"],
        document_backbone=documents,
    )
