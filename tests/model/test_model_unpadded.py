"""BERT-family sentence-transformers models encoded without padding give sentence-transformers' own embeddings,
in the caller's order, and models the unpadded path does not reproduce keep sentence-transformers' encode."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.model import load_encoder
from embedforge.model.export import export_embedder
from embedforge.model.unpadded import UnpaddedBert

TEXTS = [
    "short",
    "a cat sat on the mat while the dog slept by the door",
    "stock markets fell sharply on tuesday after the central bank raised interest rates again " * 3,
    "ünïcödé text, with punctuation!?",
    "the longest one: " + "tokens beyond the model's 256-token limit are cut, as sentence-transformers cuts them " * 30,
    "two words",
]


@pytest.fixture(scope="module")
def minilm(minilm_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.mark.parametrize("batch_size", [1, 4, 16])
def test_mean_pooling_matches_sentence_transformers(minilm, batch_size):
    ours = UnpaddedBert.of(minilm).encode(TEXTS, batch_size)
    theirs = minilm.encode(TEXTS, batch_size=batch_size, normalize_embeddings=True)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    # and not by accident: each text has its own vector, in the caller's order
    assert np.all((ours @ theirs.T).argmax(axis=1) == np.arange(len(TEXTS)))


def test_half_precision_pads_rows_to_a_bucket_with_the_same_vectors(minilm_dir, monkeypatch):
    """In bf16 the token-wise layers run on a multiple of HALF_PRECISION_ROWS rows (oneDNN keeps one kernel per
    matrix shape): the vectors are those of the unbucketed rows and of sentence-transformers' own bf16 encode, up
    to bf16 rounding, and every matmul saw a bucketed row count."""
    import torch
    import torch.nn.functional as F
    from sentence_transformers import SentenceTransformer

    from embedforge.model import unpadded

    model = SentenceTransformer(str(minilm_dir), device="cpu").to(torch.bfloat16)
    shapes: list[int] = []
    linear = F.linear
    monkeypatch.setattr(unpadded.F, "linear", lambda x, *a: shapes.append(x.shape[0]) or linear(x, *a))
    bucketed = UnpaddedBert.of(model).encode(TEXTS, 4)
    assert shapes and all(rows % unpadded.HALF_PRECISION_ROWS == 0 for rows in shapes)
    monkeypatch.setattr(unpadded, "HALF_PRECISION_ROWS", 1)
    exact_rows = UnpaddedBert.of(model).encode(TEXTS, 4)
    theirs = model.encode(TEXTS, batch_size=4)  # pooled and normalised in bf16: renormalised here
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    assert bucketed.dtype == np.float32
    assert np.all(np.sum(bucketed * exact_rows, axis=1) > 0.9999)
    assert np.all(np.sum(bucketed * theirs, axis=1) > 0.995)


def test_cls_pooling_matches_sentence_transformers(minilm):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    cls_model = SentenceTransformer(modules=[minilm[0], Pooling(384, pooling_mode="cls")], device="cpu")
    ours = UnpaddedBert.of(cls_model).encode(TEXTS, 4)
    theirs = cls_model.encode(TEXTS, batch_size=4, normalize_embeddings=True)
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    mean = UnpaddedBert.of(minilm).encode(TEXTS, 4)
    assert not np.allclose(ours, mean, atol=1e-3)  # the pooling really differs


def test_models_it_does_not_reproduce_keep_sentence_transformers(minilm, tmp_path, tiny_model_dir):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    max_pooled = SentenceTransformer(modules=[minilm[0], Pooling(384, pooling_mode="max")], device="cpu")
    assert UnpaddedBert.of(max_pooled) is None
    assert load_encoder("bundled:all-minilm-l6-v2").unpadded is not None
    # an embedforge export (a decoder, with its instructions) is encoded by sentence-transformers
    from embedforge.model import load_embedder

    export_embedder(load_embedder(tiny_model_dir), tmp_path / "st", "sentence_transformers")
    assert load_encoder(tmp_path / "st").unpadded is None


@pytest.mark.parametrize(("pooling", "pooled_tokens"), [("mean", "all"), ("mean", "text"), ("cls", "all")])
def test_the_embedder_encodes_an_encoder_backbone_unpadded_at_inference_with_its_own_vectors(
    minilm_dir, pooling, pooled_tokens
):
    """Inference through the embedder on a CPU (scoring, serving an encoder backbone) runs the real tokens only and
    gives the padded forward's vectors, instruction tokens left out of pooling as the config says; weights changed
    after loading (a checkpoint being scored) are the ones used."""
    import torch

    from embedforge.config.model import ModelConfig
    from embedforge.model import load_embedder

    config = ModelConfig(
        backbone=str(minilm_dir), pooling=pooling, pooled_tokens=pooled_tokens, lora={"enabled": False}
    )
    embedder = load_embedder(config)
    batch = embedder.tokenize(TEXTS, task="Retrieve passages", kind="query")

    def both() -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            assert embedder._runs_unpadded()
            unpadded = embedder(batch)
        with torch.enable_grad():  # training's forward: the model's own, padded
            assert not embedder._runs_unpadded()
            padded = embedder(batch).detach()
        return unpadded, padded

    embedder.eval()
    original = {k: v.clone() for k, v in embedder.backbone.state_dict().items()}
    unpadded, padded = both()
    torch.testing.assert_close(unpadded, padded, atol=2e-6, rtol=0)
    stacked = embedder._unpadded[id(embedder.backbone)]._stacked_qkv(
        0, embedder.backbone.encoder.layer[0].attention.self
    )[0]
    both()  # unchanged weights: the stack is reused, not copied again (serving one text per call)
    assert (
        embedder._unpadded[id(embedder.backbone)]._stacked_qkv(0, embedder.backbone.encoder.layer[0].attention.self)[0]
        is stacked
    )
    embedder.train()
    with torch.no_grad():  # GradCache's first pass in train mode: the dropout masks its replay draws
        assert not embedder._runs_unpadded()
    embedder.eval()
    with torch.no_grad():
        embedder.backbone.encoder.layer[0].attention.self.key.weight.mul_(1.5)
    changed, padded_changed = both()
    torch.testing.assert_close(changed, padded_changed, atol=2e-6, rtol=0)
    assert not torch.allclose(changed, unpadded, atol=1e-4)
    embedder.backbone.load_state_dict(original)  # a checkpoint loaded into the same modules
    restored, _ = both()
    torch.testing.assert_close(restored, unpadded, atol=2e-6, rtol=0)


def test_lora_wrapped_backbones_keep_the_models_own_forward(minilm_dir):
    import torch

    from embedforge.config.model import ModelConfig
    from embedforge.model import load_embedder

    embedder = load_embedder(ModelConfig(backbone=str(minilm_dir), lora={"enabled": True, "r": 4}))
    embedder.enable_lora()
    embedder.eval()
    with torch.no_grad():
        assert not embedder._runs_unpadded()  # the adapters' deltas are not in the plain weights it would stack
        embedder.merge_lora()
        assert embedder._runs_unpadded()
