"""Training objectives over embeddings: one module per loss, each tested on hand-computed values."""

from embedforge.train.losses.distill import collection_distill_loss, in_batch_distill_loss, soft_label_distill_loss
from embedforge.train.losses.embedding_distill import embedding_distill_loss
from embedforge.train.losses.infonce import infonce_loss
from embedforge.train.losses.matryoshka import truncated
from embedforge.train.losses.pair_bce import pair_bce_loss

__all__ = [
    "collection_distill_loss",
    "embedding_distill_loss",
    "in_batch_distill_loss",
    "infonce_loss",
    "pair_bce_loss",
    "soft_label_distill_loss",
    "truncated",
]
