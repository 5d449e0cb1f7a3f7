"""Reciprocal Rank Fusion (LGAI 4.1) on hand-made rankings."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.mine.fusion import fuse, ranking_from_scores, rrf_fuse, rrf_scores, standardized_mean


def test_rrf_scores_match_the_formula():
    fused = rrf_scores([["a", "b", "c"], ["b", "c", "d"]], k=60)
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 62)
    assert fused["d"] == pytest.approx(1 / 63)


def test_rrf_order_rewards_agreement_over_one_first_place():
    order = [doc for doc, _ in rrf_fuse([["a", "b", "c"], ["b", "c", "a"], ["c", "b", "a"]], k=60)]
    assert order == ["b", "c", "a"]


def test_small_k_lets_top_ranks_dominate():
    rankings = [["x", "y", "z", "w"], ["y", "z", "w", "x"], ["y", "w", "z", "x"]]
    assert rrf_fuse(rankings, k=1)[0][0] == "y"
    assert rrf_scores(rankings, k=1)["x"] == pytest.approx(1 / 2 + 1 / 5 + 1 / 5)


def test_ranking_from_scores_is_best_first_with_ties_to_the_smaller_id():
    assert ranking_from_scores([10, 11, 12, 13], np.array([0.2, 0.9, 0.2, 0.5])) == [11, 13, 10, 12]
    assert ranking_from_scores([12, 11, 10, 13], np.array([0.2, 0.9, 0.2, 0.5])) == [11, 13, 10, 12]


def test_bad_rankings_are_refused():
    with pytest.raises(ValueError, match="twice"):
        rrf_scores([["a", "a"]])
    with pytest.raises(ValueError, match="positive"):
        rrf_scores([["a"]], k=0)


def test_standardized_mean_weighs_teachers_on_different_scales_alike():
    narrow = np.array([0.90, 0.88, 0.80, 0.82])  # cosines of a teacher with a narrow range
    wide = np.array([10.0, 2.0, 6.0, 2.0])  # BM25-like scores
    fused = standardized_mean([narrow, wide])
    z_narrow = (narrow - narrow.mean()) / narrow.std()
    z_wide = (wide - wide.mean()) / wide.std()
    assert fused == pytest.approx((z_narrow + z_wide) / 2)
    # the margins survive: the first document leads both teachers by far, the rest are closer
    assert fused[0] - fused[1] > fused[1] - fused[3] > 0
    assert standardized_mean([np.full(3, 0.5), np.array([1.0, 0.0, 0.0])])[0] > 0  # a flat teacher adds nothing


def test_fuse_dispatches_and_keeps_one_teacher_raw():
    ids = [7, 8, 9]
    a, b = np.array([0.9, 0.5, 0.1]), np.array([0.2, 0.8, 0.4])
    assert fuse(ids, [a], "standardized_mean") == pytest.approx(a)
    rrf = rrf_scores([ranking_from_scores(ids, a), ranking_from_scores(ids, b)], k=60)
    assert fuse(ids, [a, b], "rrf") == pytest.approx([rrf[d] for d in ids])
    assert fuse(ids, [a, b], "standardized_mean") == pytest.approx(standardized_mean([a, b]))
    with pytest.raises(ValueError, match="unknown fusion"):
        fuse(ids, [a, b], "borda")


def test_standardized_mean_weights_each_teacher():
    rng = np.random.default_rng(0)
    dense, lexical = rng.normal(0.5, 0.1, (3, 20)), rng.gamma(2.0, 3.0, (3, 20))

    def z(x: np.ndarray) -> np.ndarray:
        return (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)

    assert standardized_mean([dense, lexical], (0.8, 0.2)) == pytest.approx(0.8 * z(dense) + 0.2 * z(lexical))
    assert standardized_mean([dense, lexical], (1.0, 0.0)) == pytest.approx(z(dense))
