"""Export an embedder for use without peft (NV-Embed App. C: LoRA merged on export).

- `merged`: an embedforge folder (`persistence` layout) with the adapters folded into full backbone weights plus
  the pooling head; `load_embedder` loads it with plain transformers.
- `sentence_transformers`: a folder with the query/document prompts and the instruction template, of one of two
  kinds, chosen here and recorded in `embedforge_export.json`:
  - `standard_modules` (`st_standard.py`): ST's own Transformer + Pooling (+ Normalize) over the merged
    checkpoint; plain `SentenceTransformer(path)` loads it. Written when they reproduce the embedder: causal
    attention, mean or last pooling, and a tokenizer that can be made to tokenize as embedforge does.
  - `custom_module` (`st_module.EmbedforgeModule` over the merged embedforge folder inside): for everything
    else (bidirectional attention, latent-attention or ATA pooling, ...); ST 6 imports a module class from
    outside its own package only with `SentenceTransformer(path, trust_remote_code=True)`, and the export logs
    and records why that configuration needs it.
Both formats get a generated model card (README.md).

`export_every_format` writes both from one model, as training does: the adapters are folded in once, and the
custom-module kind hard-links the merged export's files (weights, tokenizer, pooling head) into its `embedforge/`
folder instead of writing them again, so a 7B model takes its 14.5 GB on disk once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from embedforge.model.card import render_card
from embedforge.model.embedder import Embedder
from embedforge.model.formats import EXPORT_FORMATS
from embedforge.model.loading import EXPORT_MANIFEST
from embedforge.model.lora import fold_adapters, merged_copy
from embedforge.model.persistence import write_folder
from embedforge.model.st_encoder import write_instructions
from embedforge.model.st_standard import st_prompts, write_standard_modules

log = logging.getLogger(__name__)


CARD = "README.md"


def link_tree(source: Path, target: Path, skip: frozenset[str] = frozenset()) -> int:
    """Hard-link every file under `source` into the same place under `target` (a copy where the two are on different
    file systems or links are refused), leaving out `source`'s top-level names in `skip`; returns the bytes
    linked or copied."""
    size = 0
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if relative.parts[0] in skip or not path.is_file():
            continue
        dest = target / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)
        size += path.stat().st_size
    return size


def _write_custom_module(embedder: Embedder, directory: Path, merged_export: Path | None) -> None:
    import sentence_transformers
    import torch
    import transformers

    from embedforge.model.st_module import EMBEDDER_DIR, EmbedforgeModule

    if merged_export is None:
        write_folder(embedder, directory / EMBEDDER_DIR, merged_copy(embedder.backbone))
    else:  # the same folder write_folder would write, already on disk: linked, its model card left out
        linked = link_tree(merged_export, directory / EMBEDDER_DIR, skip=frozenset({CARD}))
        log.info("%s: linked %.1f MB of the merged export %s", directory / EMBEDDER_DIR, linked / 1e6, merged_export)
    modules = [{"idx": 0, "name": "0", "path": "", "type": f"{EmbedforgeModule.__module__}.EmbedforgeModule"}]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    st_config = {
        "model_type": "SentenceTransformer",
        "__version__": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        },
        "prompts": st_prompts(embedder.config.instructions),
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    (directory / "config_sentence_transformers.json").write_text(json.dumps(st_config, indent=2) + "\n")


def _export_sentence_transformers(embedder: Embedder, directory: Path, merged_export: Path | None) -> str | None:
    """Write the standard-modules kind where possible, else the custom module; returns why the latter was needed."""
    reason = write_standard_modules(embedder, directory)
    if reason is None:
        log.info("%s: sentence-transformers export of ST's own modules; SentenceTransformer(path) loads it", directory)
    else:
        log.warning(
            "%s: sentence-transformers export uses embedforge's custom module, so it loads only with "
            "SentenceTransformer(path, trust_remote_code=True) and embedforge installed, because of %s",
            directory,
            reason,
        )
        _write_custom_module(embedder, directory, merged_export)
    write_instructions(directory, embedder.config.instructions)
    manifest = {
        "format": "sentence_transformers",
        "kind": "standard_modules" if reason is None else "custom_module",
        "trust_remote_code": reason is not None,
        "custom_module_reason": reason,
        "name": embedder.name,
        "backbone_ref": embedder.backbone_ref,
        "model": embedder.config.model_dump(mode="json"),
    }
    (directory / EXPORT_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return reason


def export_embedder(
    embedder: Embedder,
    directory: Path,
    format: str,
    card: dict[str, Any] | None = None,
    merged_export: Path | None = None,
) -> Path:
    """Write `embedder` to `directory` as `format` (see module docstring) with a model card; returns `directory`.
    `merged_export`: this embedder's `merged` export, whose files the custom-module kind links."""
    if format not in EXPORT_FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of {EXPORT_FORMATS}")
    directory.mkdir(parents=True, exist_ok=True)
    custom_reason = None
    if format == "merged":
        write_folder(embedder, directory, merged_copy(embedder.backbone), extra={"exported": "merged"})
    else:
        custom_reason = _export_sentence_transformers(embedder, directory, merged_export)
    (directory / CARD).write_text(render_card(embedder, format, card, custom_reason))
    log.info("exported %s as %s to %s", embedder.name, format, directory)
    return directory


def export_every_format(embedder: Embedder, directory: Path, card: dict[str, Any] | None = None) -> dict[str, Path]:
    """Every format of `EXPORT_FORMATS` into `directory/<format>`, from one merge (see the module docstring). The
    adapters are folded into `embedder`'s own backbone, so `embedder` is left merged, with no peft wrapper."""
    embedder.backbone = fold_adapters(embedder.backbone)
    merged = export_embedder(embedder, directory / "merged", "merged", card)
    st = export_embedder(embedder, directory / "sentence_transformers", "sentence_transformers", card, merged)
    return {"merged": merged, "sentence_transformers": st}
