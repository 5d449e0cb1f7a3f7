"""Rocchio pseudo-relevance feedback on dense teachers' query vectors (`mine.teachers[].feedback`): the expansion
itself, the config that turns it on, and mining's dense view, which feeds back every query it retrieves and scores
with (real faiss, a real embedding cache, no Ray)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from embedforge.config import load_config
from embedforge.config.mine import FeedbackConfig, MineConfig, TeacherConfig
from embedforge.data.schema import TrainingExample
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.mine.feedback import expand_queries, rocchio
from embedforge.mine.index import build_index
from embedforge.mine.miner import PoolMiner
from embedforge.mine.pools import build_pools
from embedforge.mine.run import _dense_view
from embedforge.mine.teachers.dense import DenseIdentity

# four documents on a circle; the query sits nearest document 0, documents 1 and 2 lie on the far side of it
DOCS = np.array([[1.0, 0.0], [0.8, 0.6], [0.6, 0.8], [0.0, -1.0]], dtype=np.float32)
QUERY = np.array([[0.96, -0.28]], dtype=np.float32)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def test_rocchio_adds_the_weighted_mean_of_the_valid_feedback_and_normalises():
    queries = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    feedback = np.array([[[0.0, 1.0], [0.0, 1.0]], [[1.0, 0.0], [9.0, 9.0]]], dtype=np.float32)
    out = rocchio(queries, feedback, valid=np.array([[True, True], [True, False]]), weight=0.5)
    # query 1 has one valid feedback row: the second (9, 9) is padding and must not count
    assert out == pytest.approx(_unit(np.array([[1.0, 0.5], [0.5, 1.0]])), abs=1e-6)
    assert np.linalg.norm(out, axis=1) == pytest.approx([1.0, 1.0])


def test_a_query_moves_towards_its_top_documents():
    index = build_index(DOCS, MineConfig())
    before = (QUERY @ DOCS.T)[0]
    assert np.argsort(-before)[:2].tolist() == [0, 1]
    expanded = expand_queries(QUERY, index, DOCS, FeedbackConfig(depth=2, weight=1.0))
    assert expanded[0] == pytest.approx(_unit(QUERY[0] + (DOCS[0] + DOCS[1]) / 2), abs=1e-6)
    after = (expanded @ DOCS.T)[0]
    # fed back with documents 0 and 1, the query now prefers document 2 (their side) to document 3 by more
    assert after[2] - after[3] > before[2] - before[3]
    assert after[2] > before[2] and after[3] < before[3]


def test_a_feedback_depth_past_the_corpus_uses_every_document_once():
    index = build_index(DOCS, MineConfig())
    expanded = expand_queries(QUERY, index, DOCS, FeedbackConfig(depth=10, weight=0.5))
    assert expanded[0] == pytest.approx(_unit(QUERY[0] + 0.5 * DOCS.mean(axis=0)), abs=1e-6)


def test_feedback_is_for_dense_teachers_and_leaves_earlier_configs_hashes_alone():
    with pytest.raises(ValueError, match="feedback applies to dense teachers only"):
        TeacherConfig(kind="bm25", feedback={"depth": 5})
    with pytest.raises(ValueError, match="greater than 0"):
        FeedbackConfig(weight=0)
    plain = TeacherConfig(kind="sentence_transformers", model="bundled:all-minilm-l6-v2")
    assert "feedback" not in json.loads(plain.model_dump_json())  # a stage mined without it keeps its hash
    profile = load_config("configs/documents.yaml").mine.teachers
    assert [t.feedback for t in profile] == [FeedbackConfig(depth=5, weight=0.3)] * 2


def test_the_dense_view_feeds_back_every_query_it_retrieves_and_scores_with(tmp_path):
    shared = {"task_name": "toy", "task_type": "retrieval", "instruction": "Find it", "query": "q"}
    examples = [
        TrainingExample(id="a", positive="d0", negatives=["d2", "d3"], **shared),
        TrainingExample(id="b", positive="d1", **shared),
    ]
    pool = build_pools(examples)[0]
    assert pool.corpus == ["d0", "d2", "d3", "d1"]
    docs = DOCS[[0, 2, 3, 1]]
    config = load_config("configs/tiny.yaml")
    feedback = FeedbackConfig(depth=2, weight=1.0)
    teacher = TeacherConfig(kind="sentence_transformers", model="bundled:all-minilm-l6-v2", feedback=feedback)
    identity = DenseIdentity(teacher)
    root = str(tmp_path / "cache")
    EmbeddingCache(root, identity("document", None)).put(pool.corpus, docs)
    [key] = pool.queries()
    EmbeddingCache(root, identity("query", key[0])).put([key[1]], QUERY)

    view = _dense_view(pool, teacher, root, tmp_path / "fed.npy", config)
    expected = expand_queries(QUERY, build_index(docs, config.mine), docs, feedback)
    assert float(expected[0] @ QUERY[0]) < 0.99  # feedback moved it
    assert view.query_vectors([key]) == pytest.approx(expected, abs=1e-6)
    plain = _dense_view(pool, teacher.model_copy(update={"feedback": None}), root, tmp_path / "plain.npy", config)
    assert plain.query_vectors([key]) == pytest.approx(QUERY)

    # the miner's scores are the fed-back query's cosines
    mine = MineConfig(selection={"margin_type": "none", "num_negatives": 2, "candidate_k": 2})
    [result] = PoolMiner(pool, mine, dense=[view]).mine([key])
    assert result.scores[2] == pytest.approx(float(expected[0] @ docs[2]), abs=1e-6)
