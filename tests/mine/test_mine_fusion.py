"""Reciprocal Rank Fusion (LGAI 4.1) on hand-made rankings."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.mine.fusion import ranking_from_scores, rrf_fuse, rrf_scores


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
