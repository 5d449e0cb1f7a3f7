"""Training with frozen documents: each document's fixed vector is read from the embedding cache once (or encoded
once), steps look documents up instead of running them through the model, and `distill.over: collection` gets
each example's whole candidate list as rows of that table."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from embedforge.config.model import ModelConfig
from embedforge.data.schema import TrainingExample
from embedforge.model import load_embedder
from embedforge.models.bundled import prepare
from embedforge.train.batching import Batch, BatchItem
from embedforge.train.document_table import DocumentTable, frozen_document_texts
from embedforge.train.inputs import Encoder, TextInput, collection_targets

COLLECTION = ["The river runs by the castle.", "An engine in the harbor.", "Violin strings.", "Glacier ice."]
TASK = "Retrieve semantically similar text."


@pytest.fixture(scope="module")
def embedder():
    prepare(["tiny-bert"])
    config = {"backbone": "bundled:tiny-bert", "lora": {"enabled": False}, "instructions": {"query_template": ""}}
    return load_embedder(ModelConfig.model_validate({**config, "max_doc_length": 256, "frozen_documents": True}))


def _example(i: int, positive: str, negatives: list[str], scores: list[float], task_type: str = "retrieval"):
    return TrainingExample(
        id=f"e{i}", task_name="synthetic", task_type=task_type, instruction=TASK, query=f"query {i}",
        positive=positive, negatives=negatives, positive_score=scores[0], negative_scores=scores[1:],
    )  # fmt: skip


def test_the_table_holds_the_collection_and_the_asymmetric_examples_documents_read_from_the_cache(embedder, tmp_path):
    examples = [
        _example(0, "A positive outside the collection.", COLLECTION[:2], [0.03, 0.02, 0.01]),
        _example(1, "An STS sentence.", ["another"], [1.0, 0.5], task_type="sts"),  # symmetric: trained side
    ]
    texts = frozen_document_texts(examples, COLLECTION)
    assert texts == [*COLLECTION, "A positive outside the collection."]
    first = DocumentTable.build(embedder, texts, str(tmp_path))
    np.testing.assert_allclose(first.vectors.numpy(), embedder.encode_documents(texts), atol=1e-6)
    # a second run encodes nothing: the cache holds every vector under the starting model's identity
    embedder.texts_encoded = 0
    second = DocumentTable.build(embedder, texts, str(tmp_path))
    assert embedder.texts_encoded == 0 and torch.equal(first.vectors, second.vectors)
    with pytest.raises(KeyError, match="not among the run's frozen document vectors"):
        first.indices(["a text the run never saw"])


def test_steps_look_frozen_documents_up_and_encode_symmetric_ones(embedder, tmp_path):
    table = DocumentTable.build(embedder, COLLECTION, str(tmp_path))
    trained = copy.deepcopy(embedder).eval()  # eval: no dropout between the two forward passes
    with torch.no_grad():
        for p in trained.backbone.parameters():  # as a training step moves them
            p.add_(0.05 * torch.randn_like(p))
    encoder = Encoder(trained, documents=table)
    mixed = [TextInput(COLLECTION[2], None, "document"), TextInput(COLLECTION[0], TASK, "document")]
    with torch.no_grad():
        out = encoder(mixed)
        trained_side = trained(trained.tokenize([COLLECTION[0]], TASK, "document"))
    assert torch.equal(out[0], table.vectors[2])
    torch.testing.assert_close(out[1], trained_side[0], atol=1e-5, rtol=0)
    assert not torch.allclose(out[1], table.vectors[0], atol=1e-3)


def test_collection_targets_are_each_examples_whole_candidate_list(embedder, tmp_path):
    table = DocumentTable.build(embedder, COLLECTION, str(tmp_path))
    long = _example(0, COLLECTION[0], COLLECTION[1:], [0.03, 0.02, 0.01, 0.005])
    short = _example(1, COLLECTION[3], [COLLECTION[1]], [0.02, math.nan])
    # the step trains on no negative (num_negatives: 0); the target still spans every mined candidate
    batch = Batch(0, "synthetic", None, [BatchItem(long, [], [0.03]), BatchItem(short, [], [0.02])])
    rows, scores = collection_targets(batch, table)
    assert rows.tolist() == [[0, 1, 2, 3], [3, 1, 0, 0]]
    assert scores[0].tolist() == pytest.approx([0.03, 0.02, 0.01, 0.005])
    assert scores[1, 0].item() == pytest.approx(0.02) and math.isnan(scores[1, 1].item())
    assert scores[1, 2:].tolist() == [-math.inf, -math.inf]
