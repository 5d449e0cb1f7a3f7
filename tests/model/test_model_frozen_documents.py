"""Query-side adaptation (`model.frozen_documents`): documents keep the starting model's vectors through training,
saving, export and the embedding cache, while queries (and both sides of symmetric tasks) take the trained weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedforge.config import load_config
from embedforge.config.mine import TeacherConfig
from embedforge.config.model import ModelConfig
from embedforge.embeddings.cache import model_fingerprint
from embedforge.mine.teachers.dense import dense_identity
from embedforge.model import load_embedder, load_encoder
from embedforge.models.bundled import prepare

TINY_BERT = "bundled:tiny-bert"
DOCUMENTS = ["A note on the river and the castle.", "Engines of the harbor at night.", "Violin strings."]
QUERIES = ["river castle", "harbor engines"]
TASK = "Retrieve semantically similar text."


def _config(**extra) -> ModelConfig:
    values = {"backbone": TINY_BERT, "lora": {"enabled": False}, "instructions": {"query_template": ""}}
    return ModelConfig.model_validate({**values, "max_doc_length": 256, "frozen_documents": True, **extra})


@pytest.fixture(scope="module")
def trained():
    """The tiny BERT with frozen documents and every trainable weight moved, as training moves them."""
    prepare(["tiny-bert"])
    embedder = load_embedder(_config())
    torch.manual_seed(0)
    with torch.no_grad():
        for p in embedder.backbone.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return embedder


def test_documents_keep_the_starting_models_vectors_and_queries_take_the_trained_ones(trained):
    start = load_encoder(TINY_BERT)
    np.testing.assert_allclose(trained.encode_documents(DOCUMENTS), start.encode_documents(DOCUMENTS), atol=1e-5)
    assert not np.allclose(trained.encode_queries(QUERIES), start.encode_queries(QUERIES), atol=1e-3)
    # a symmetric task gives both sides the trained weights (they must compare alike)
    np.testing.assert_allclose(
        trained.encode_documents(DOCUMENTS, task=TASK), trained.encode_queries(DOCUMENTS, task=TASK), atol=1e-5
    )
    assert not any(p.requires_grad for p in trained.document_backbone.parameters())


def test_saving_and_loading_keep_both_sides(trained, tmp_path):
    from embedforge.model.persistence import save_embedder

    folder = save_embedder(trained, tmp_path / "model")
    assert (folder / "document_backbone" / "config.json").is_file()
    loaded = load_encoder(folder)
    np.testing.assert_allclose(loaded.encode_documents(DOCUMENTS), trained.encode_documents(DOCUMENTS), atol=1e-5)
    np.testing.assert_allclose(loaded.encode_queries(QUERIES), trained.encode_queries(QUERIES), atol=1e-5)


def test_the_sentence_transformers_export_routes_documents_to_the_starting_model(trained, tmp_path):
    from sentence_transformers import SentenceTransformer

    from embedforge.model.export import export_embedder

    folder = export_embedder(trained, tmp_path / "st", "sentence_transformers")
    assert "frozen documents" in (folder / "README.md").read_text()
    model = SentenceTransformer(str(folder), trust_remote_code=True, device="cpu")
    documents = model.encode_document(DOCUMENTS, normalize_embeddings=True)
    queries = model.encode_query(QUERIES, normalize_embeddings=True)
    np.testing.assert_allclose(documents, trained.encode_documents(DOCUMENTS), atol=1e-5)
    np.testing.assert_allclose(queries, trained.encode_queries(QUERIES), atol=1e-5)


def test_the_document_side_shares_the_starting_models_cache_identity(trained):
    """Mining's teacher of the starting folder, evaluation of the starting folder and the trained model's document
    side name the collection's vectors alike, so it is encoded once; queries are the trained model's own."""
    fingerprint = model_fingerprint(TINY_BERT)
    start = load_encoder(TINY_BERT).cache_identity(fingerprint, "document", None)
    assert start is not None
    assert trained.cache_identity("any trained folder", "document", None) == start
    assert dense_identity(TeacherConfig(kind="embedforge", model=TINY_BERT), "document", None) == start
    assert trained.cache_identity("any trained folder", "query", None) is None
    assert trained.cache_identity("any trained folder", "document", TASK) is None
    # another length cuts documents elsewhere: not the folder's vectors, another identity
    other = load_embedder(_config(max_doc_length=64))
    assert other.cache_identity("x", "document", None) not in (None, start)


def test_configs_that_cannot_keep_documents_frozen_fail_before_any_work():
    from pydantic import ValidationError

    from embedforge.config.loader import ConfigError

    with pytest.raises(ValidationError, match="latent-attention"):
        _config(pooling="latent_attention")
    base = load_config("configs/documents.yaml")
    with pytest.raises(ConfigError, match=r"needs model\.frozen_documents: true"):
        load_config("configs/documents.yaml", ["model.frozen_documents=false"])
    with pytest.raises(ConfigError, match="turn gradcache off"):
        load_config("configs/documents.yaml", ["train.gradcache.enabled=true"])
    with pytest.raises(ConfigError, match="applies to full fine-tuning"):
        load_config("configs/documents.yaml", ["model.lora.enabled=true"])
    assert base.model.frozen_documents and base.train.stages[0].losses.distills_over_collection


def test_full_fine_tuning_can_leave_the_token_embeddings_as_they_are():
    from embedforge.train.trainable import build_trainable

    config = load_config(
        "configs/tiny.yaml",
        ["model.backbone=bundled:tiny-bert", "model.lora.enabled=false", "train.freeze_token_embeddings=true"],
    )
    embedder = build_trainable(config)
    frozen = [n for n, p in embedder.backbone.named_parameters() if not p.requires_grad]
    assert frozen == ["embeddings.word_embeddings.weight"]
