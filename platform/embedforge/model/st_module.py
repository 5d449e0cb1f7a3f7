"""A sentence-transformers input module that runs the embedforge embedder, so exports encode exactly alike.

The export's fallback kind (`export.py`): where ST's own modules cannot reproduce the embedder (`st_standard.py`
says when: bidirectional attention, latent-attention or ATA pooling, tokenizers it cannot adapt), the folder holds
this module, which `SentenceTransformer(path, trust_remote_code=True)` loads from `modules.json`
(`type: embedforge.model.st_module.EmbedforgeModule`): sentence-transformers 6 imports any module class outside
its own namespace only with `trust_remote_code=True`, local folders included. It reuses embedforge's own
tokenization and pooling, so encodings match exactly.
ST passes the prompt apart from the texts (`preprocess(inputs, prompt=...)`), which is the same (prefix, text)
split embedforge tokenizes, so the instruction is excluded from pooling there too. `encode_query` /
`encode_document` pass `task="query"|"document"`, which picks the configured maximum length, and with
`model.frozen_documents` whether the starting model encodes the texts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from sentence_transformers.base.modules.input_module import InputModule

from embedforge.model.embedder import Embedder
from embedforge.model.loading import EMBEDDER_DIR
from embedforge.model.lora import merged_copy
from embedforge.model.persistence import load_saved, write_folder
from embedforge.model.tokenization import EncodedBatch, tokenize_pairs


class EmbedforgeModule(InputModule):
    config_keys: list[str] = []  # noqa: RUF012 (ST's class attribute)

    def __init__(self, embedder: Embedder) -> None:
        super().__init__()
        self.embedder = embedder

    @property
    def max_seq_length(self) -> int:
        return max(self.embedder.config.max_query_length, self.embedder.config.max_doc_length)

    def get_embedding_dimension(self) -> int:
        return self.embedder.dimension

    def get_sentence_embedding_dimension(self) -> int:
        return self.embedder.dimension

    def preprocess(self, inputs: Any, prompt: str | None = None, **kwargs: Any) -> dict[str, torch.Tensor]:
        texts = list(inputs)
        task = kwargs.get("task")
        is_query = task == "query" or (task is None and bool(prompt))
        cfg = self.embedder.config
        batch = tokenize_pairs(
            self.embedder.tokenizer,
            [prompt or ""] * len(texts),
            texts,
            cfg.max_query_length if is_query else cfg.max_doc_length,
            self.embedder.padding_side,
            cfg.pooled_tokens == "all",
        )
        # documents with their own prefix, not an instruction, go through the frozen starting model
        # (model.frozen_documents), as `Embedder.encode_documents` without a task
        bare = (prompt or "") == cfg.instructions.document_prefix
        frozen = not is_query and bare and self.embedder.frozen_side("document", None)
        return {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "pool_mask": batch.pool_mask,
            "position_ids": batch.position_ids,
            "frozen": torch.tensor(frozen),
        }

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        batch = EncodedBatch(
            features["input_ids"], features["attention_mask"], features["pool_mask"], features["position_ids"], 0
        )
        frozen = bool(features["frozen"]) if "frozen" in features else False
        features["sentence_embedding"] = self.embedder(batch, frozen=frozen)
        return features

    def save(self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any) -> None:
        """The merged embedder in the folder's `embedforge/`, as the export writes it."""
        write_folder(self.embedder, Path(output_path) / EMBEDDER_DIR, merged_copy(self.embedder.backbone))

    @classmethod
    def load(cls, model_name_or_path: str, subfolder: str = "", **kwargs: Any) -> EmbedforgeModule:
        path = Path(model_name_or_path) / subfolder / EMBEDDER_DIR
        if not path.is_dir():
            raise FileNotFoundError(f"{path} missing: not a sentence-transformers folder exported by embedforge")
        return cls(load_saved(path))
