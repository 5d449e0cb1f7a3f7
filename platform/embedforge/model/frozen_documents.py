"""Query-side adaptation (`model.frozen_documents`): documents keep the starting model, queries are adapted.

Domain adaptation usually re-encodes the whole collection with the tuned model. With the document side frozen, the
index a user built with the starting model stays valid, the trained model's document vectors are the starting
model's (evaluation and serving read the collection's vectors from the embedding cache instead of encoding it
again), and training can score every query against the whole collection's fixed vectors, which makes a listwise
distillation of the teachers' ranking over the collection exact and cheap (`train/losses/distill.py`,
`distill.over: collection`). The query side is a copy of the starting model that trains (all weights or LoRA).
"""

from __future__ import annotations

import torch

from embedforge.config.model import ModelConfig
from embedforge.embeddings.cache import encoder_identity, model_fingerprint


def starting_identity(config: ModelConfig, backbone_ref: str, weights: set[torch.dtype]) -> str:
    """The cache identity of the frozen document side (`config`, started from `backbone_ref`, its weights in
    `weights` dtypes): the starting model's own. When the starting model is a sentence-transformers folder and the
    document side encodes exactly as the folder does (its pooling, prompt and length, float32 weights), the folder's
    identity (`st_encoder.folder_identity`), which mining's teacher of that folder and evaluation of the starting
    model use too; otherwise one named by the starting backbone and the document settings."""
    from embedforge.model.st_encoder import folder_identity, plain_folder_spec

    fingerprint = model_fingerprint(backbone_ref)
    spec = plain_folder_spec(backbone_ref)
    if (
        spec is not None
        and spec.pooling == config.pooling
        and spec.pools_prompt == (config.pooled_tokens == "all")
        and spec.own_prefix("document", None) == config.instructions.document_prefix
        and spec.max_seq_length == config.max_doc_length
        and weights == {torch.float32}
    ):
        identity = folder_identity(fingerprint, spec, "document", None)
        if identity is not None:
            return identity
    settings = config.model_dump_json(include={"pooling", "pooled_tokens", "bidirectional", "max_doc_length"})
    return encoder_identity(
        fingerprint,
        "frozen_documents",
        config.instructions.document_prefix,
        "document",
        settings=settings,
        dtype=",".join(sorted(str(w) for w in weights)),
    )
