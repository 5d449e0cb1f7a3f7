"""Pools and the per-pool miner with real teachers over hand-made data: faiss over chosen vectors, BM25, RRF."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.config.mine import MineConfig, SelectionConfig
from embedforge.data.schema import TrainingExample
from embedforge.mine.index import build_index
from embedforge.mine.miner import DenseView, PoolMiner
from embedforge.mine.pools import build_pools
from embedforge.mine.teachers.lexical import BM25Teacher


def _ex(query: str, positive: str, negatives=(), task_type="retrieval", instruction="Find it") -> TrainingExample:
    return TrainingExample(
        id=f"{query}->{positive}",
        task_name="toy",
        task_type=task_type,
        instruction=instruction,
        query=query,
        positive=positive,
        negatives=list(negatives),
    )


def test_pools_group_positives_and_split_symmetric_instructions():
    examples = [
        _ex("q1", "p1", ["n1", "p2"]),
        _ex("q1", "p2"),
        _ex("q2", "p1"),
        _ex("s1", "s2", task_type="sts", instruction="A"),
        _ex("s3", "s4", task_type="sts", instruction="B"),
    ]
    pools = build_pools(examples)
    assert [p.doc_instruction for p in pools] == [None, "A", "B"]
    retrieval = pools[0]
    assert retrieval.corpus == ["p1", "n1", "p2"]
    assert retrieval.positives == {("Find it", "q1"): [0, 2], ("Find it", "q2"): [0]}
    assert retrieval.examples == [0, 1, 2]
    with pytest.raises(ValueError, match="empty query or positive"):
        build_pools([_ex(" ", "p")])


def _toy_pool_and_views():
    # corpus: 0 positive of q, 1..4 candidates, dense teacher scores via chosen vectors
    examples = [_ex("cats purr", "cats purr softly"), _ex("cats purr", "a purring cat")]
    examples[0].negatives = ["dogs bark loudly", "cats sleep a lot", "cats purr softly", "stock markets fell"]
    pool = build_pools(examples)[0]
    assert pool.corpus == [
        "cats purr softly",
        "dogs bark loudly",
        "cats sleep a lot",
        "stock markets fell",
        "a purring cat",
    ]
    docs = np.array([[1.0, 0.0], [0.6, 0.8], [0.9, np.sqrt(1 - 0.81)], [0.0, 1.0], [0.8, 0.6]], dtype=np.float32)
    query = np.array([[1.0, 0.0]], dtype=np.float32)
    view = DenseView(docs, build_index(docs, MineConfig()), lambda keys: np.repeat(query, len(keys), axis=0))
    return pool, view


def test_dense_only_uses_raw_scores_and_the_lowest_positive():
    pool, view = _toy_pool_and_views()
    config = MineConfig(selection=SelectionConfig(margin=0.95, num_negatives=3, candidate_k=4))
    [result] = PoolMiner(pool, config, dense=[view]).mine(pool.queries())
    # positives score 1.0 and 0.8 -> threshold 0.76: "cats sleep a lot" (0.9) is a likely false negative
    assert [pool.corpus[d] for d in result.candidate_ids] == ["dogs bark loudly", "stock markets fell"]
    assert result.selection.scores == pytest.approx([0.6, 0.0], abs=1e-6)
    assert result.selection.drops["margin"] == 1 and result.selection.drops["positive"] == 2
    assert result.scores[0] == pytest.approx(1.0) and result.scores[4] == pytest.approx(0.8)


def test_dense_plus_bm25_is_fused_by_rrf():
    pool, view = _toy_pool_and_views()
    bm25 = BM25Teacher(pool.corpus)
    config = MineConfig(selection=SelectionConfig(margin_type="none", num_negatives=3, candidate_k=4), rrf_k=60)
    [result] = PoolMiner(pool, config, dense=[view], bm25=bm25).mine(pool.queries())
    dense_rank = {0: 1, 2: 2, 4: 3, 1: 4, 3: 5}
    bm25_scores = bm25.scores("cats purr")
    order = np.argsort(-bm25_scores[[0, 1, 2, 3, 4]], kind="stable")
    bm25_rank = {int(d): r for r, d in enumerate(order, start=1)}
    for d in range(5):
        assert result.scores[d] == pytest.approx(1 / (60 + dense_rank[d]) + 1 / (60 + bm25_rank[d]))
    assert result.candidate_ids[0] == 2  # "cats sleep a lot": second for dense and matches "cats" for BM25
    assert set(result.candidate_ids) == {1, 2, 3}


def test_random_sampling_does_not_depend_on_the_other_queries_in_the_chunk():
    examples = [_ex(f"query {i}", f"doc {i}", [f"doc {j}" for j in range(12)]) for i in range(6)]
    pool = build_pools(examples)[0]
    bm25 = BM25Teacher(pool.corpus)
    config = MineConfig(
        selection=SelectionConfig(margin_type="none", sampling="random", num_negatives=2, candidate_k=8)
    )
    keys = pool.queries()
    together = PoolMiner(pool, config, bm25=bm25).mine(keys, seed=3)
    alone = PoolMiner(pool, config, bm25=bm25).mine(keys[2:3], seed=3)
    assert together[2].candidate_ids == alone[0].candidate_ids
    assert len(alone[0].candidate_ids) == 2


def test_soft_labels_from_one_teacher_are_its_own_scores_while_selection_uses_the_fusion():
    """`mine.soft_labels_from` names the teacher whose raw scores become the labels; the fused RRF scores still
    rank and select the negatives."""
    from embedforge.config.mine import TeacherConfig

    pool, view = _toy_pool_and_views()
    bm25 = BM25Teacher(pool.corpus)
    teachers = [TeacherConfig(kind="bm25"), TeacherConfig(kind="sentence_transformers", model="m")]
    selection = SelectionConfig(margin_type="none", num_negatives=3, candidate_k=4)
    fused_only = MineConfig(teachers=teachers, selection=selection)
    labelled = MineConfig(teachers=teachers, selection=selection, soft_labels_from=1)  # the dense teacher
    assert labelled.soft_label_position() == 0 and fused_only.soft_label_position() is None
    assert MineConfig(teachers=teachers, soft_labels_from=0).soft_label_position() == 1  # BM25 after dense ones
    [plain] = PoolMiner(pool, fused_only, dense=[view], bm25=bm25).mine(pool.queries())
    [result] = PoolMiner(pool, labelled, dense=[view], bm25=bm25).mine(pool.queries())
    assert plain.labels is None
    assert result.candidate_ids == plain.candidate_ids and result.scores == plain.scores
    cosine = {d: float(view.doc_vectors[d] @ np.array([1.0, 0.0])) for d in result.labels}
    assert result.labels == pytest.approx(cosine, abs=1e-6)
    assert "soft_labels_from" not in fused_only.model_dump()  # unset, the stage hash stays what it was
    with pytest.raises(ValueError, match="only 2 teachers"):
        MineConfig(teachers=teachers, soft_labels_from=2)


def test_standardized_mean_fusion_keeps_the_teachers_margins_as_scores():
    """`mine.fusion: standardized_mean`: the fused scores (the soft labels) are the mean of each teacher's z-scores
    over the query's documents; a perc_pos margin cannot read z-scores, so that config is refused."""
    from embedforge.config.mine import TeacherConfig

    pool, view = _toy_pool_and_views()
    bm25 = BM25Teacher(pool.corpus)
    teachers = [TeacherConfig(kind="sentence_transformers", model="m"), TeacherConfig(kind="bm25")]
    selection = SelectionConfig(margin_type="none", num_negatives=3, candidate_k=4)
    config = MineConfig(teachers=teachers, selection=selection, fusion="standardized_mean")
    [result] = PoolMiner(pool, config, dense=[view], bm25=bm25).mine(pool.queries())
    ids = sorted(result.scores)
    dense = np.array([float(view.doc_vectors[d] @ np.array([1.0, 0.0])) for d in ids])
    lexical = bm25.scores("cats purr")[ids]
    expected = ((dense - dense.mean()) / dense.std() + (lexical - lexical.mean()) / lexical.std()) / 2
    assert [result.scores[d] for d in ids] == pytest.approx(expected)
    assert result.candidate_ids[0] == 2  # "cats sleep a lot" leads the negatives, as under RRF
    assert "fusion" not in MineConfig(teachers=teachers, selection=selection).model_dump()  # the hash stays
    with pytest.raises(ValueError, match="perc_pos margin cannot scale"):
        MineConfig(teachers=teachers, fusion="standardized_mean")
