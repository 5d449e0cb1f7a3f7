"""Export an embedder for use without peft (NV-Embed App. C: LoRA merged on export).

- `merged`: an embedforge folder (`persistence` layout) with the adapters folded into full backbone weights plus
  the pooling head; `load_embedder` loads it with plain transformers.
- `sentence_transformers`: a folder `SentenceTransformer(path)` loads, through `st_module.EmbedforgeModule`,
  with the merged embedforge folder inside, the query/document prompts, and the instruction template.
Both get a generated model card (README.md).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from embedforge.model.card import render_card
from embedforge.model.embedder import Embedder
from embedforge.model.instructions import render_prefix
from embedforge.model.lora import merged_copy
from embedforge.model.persistence import write_folder
from embedforge.model.st_encoder import write_instructions

log = logging.getLogger(__name__)
FORMATS = ("merged", "sentence_transformers")


def _export_sentence_transformers(embedder: Embedder, directory: Path) -> None:
    import sentence_transformers
    import torch
    import transformers

    from embedforge.model.st_module import EMBEDDER_DIR, EmbedforgeModule

    write_folder(embedder, directory / EMBEDDER_DIR, merged_copy(embedder.backbone))
    modules = [{"idx": 0, "name": "0", "path": "", "type": f"{EmbedforgeModule.__module__}.EmbedforgeModule"}]
    (directory / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    st_config = {
        "model_type": "SentenceTransformer",
        "__version__": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "pytorch": torch.__version__,
        },
        "prompts": {"query": render_prefix(embedder.config.instructions, None), "document": ""},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    (directory / "config_sentence_transformers.json").write_text(json.dumps(st_config, indent=2) + "\n")
    write_instructions(directory, embedder.config.instructions)


def export_embedder(embedder: Embedder, directory: Path, format: str, card: dict[str, Any] | None = None) -> Path:
    if format not in FORMATS:
        raise ValueError(f"unknown export format {format!r}; use one of {FORMATS}")
    directory.mkdir(parents=True, exist_ok=True)
    if format == "merged":
        write_folder(embedder, directory, merged_copy(embedder.backbone), extra={"exported": "merged"})
    else:
        _export_sentence_transformers(embedder, directory)
    (directory / "README.md").write_text(render_card(embedder, format, card))
    log.info("exported %s as %s to %s", embedder.name, format, directory)
    return directory
