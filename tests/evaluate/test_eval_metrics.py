"""Every metric on hand-made inputs whose values are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from embedforge.evaluate import metrics


def test_ndcg_linear_gain_against_hand_computed_value():
    qrels = {"a": 0.0, "b": 2.0, "c": 1.0}
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert metrics.ndcg_at_k(["a", "b", "c"], qrels, 10) == pytest.approx(dcg / idcg)
    assert metrics.ndcg_at_k(["b", "c", "a"], qrels, 10) == pytest.approx(1.0)
    assert metrics.ndcg_at_k(["a", "b", "c"], qrels, 1) == 0.0
    assert metrics.ndcg_at_k(["a"], {"a": 0.0}, 10) == 0.0  # no relevant document


def test_recall_reciprocal_rank_and_average_precision():
    qrels = {"a": 1.0, "b": 1.0, "c": 0.0}
    assert metrics.recall_at_k(["c", "a", "d"], qrels, 2) == 0.5
    assert metrics.recall_at_k(["a", "b"], qrels, 1) == 0.5
    assert metrics.recall_at_k(["a", "b"], qrels, 5) == 1.0
    assert metrics.reciprocal_rank(["c", "a"], qrels, 10) == 0.5
    assert metrics.reciprocal_rank(["c", "d", "a"], qrels, 2) == 0.0
    assert metrics.average_precision(["a", "x", "b", "y"], qrels) == pytest.approx((1 + 2 / 3) / 2)
    assert metrics.average_precision(["x", "a"], qrels) == pytest.approx((1 / 2) / 2)  # b never retrieved


def test_rank_documents_orders_by_score_and_breaks_ties_by_descending_id():
    scores = np.array([[0.1, 0.9, 0.5, 0.5], [1.0, 0.0, 0.0, 0.0]])
    ranked = metrics.rank_documents(scores, ["d1", "d2", "d3", "d4"], top_k=3)
    assert ranked[0] == ["d2", "d4", "d3"]
    assert ranked[1] == ["d1", "d4", "d3"]


def test_running_top_k_over_blocks_equals_ranking_the_whole_matrix():
    """Retrieval scores the corpus block by block (issue 24): the kept top_k, ties across blocks included, are
    the whole matrix's."""
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=(6, 40)).astype(np.float32)  # many ties, straddling every block
    ids = [f"d{i:02d}" for i in rng.permutation(40)]
    whole = metrics.rank_documents(scores, ids, top_k=7)
    for block in (1, 3, 16):
        running = metrics.RunningTopK(ids, len(scores), top_k=7)
        for start in range(0, 40, block):
            running.add(scores[:, start : start + block], start)
        assert running.rankings() == whole


def test_cosine_and_spearman():
    a = np.array([[1.0, 0.0], [1.0, 1.0]])
    b = np.array([[0.0, 2.0], [2.0, 2.0]])
    assert metrics.cosine_pairs(a, b) == pytest.approx([0.0, 1.0])
    # ranks of the prediction: 1 2 4 3 -> sum d^2 = 2 -> 1 - 6*2 / (4*15) = 0.8
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 40, 30]) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="at least 2"):
        metrics.spearman([1], [1])


def test_pair_average_precision():
    # ranked by similarity: pos, neg, pos, neg -> AP = (1/1 + 2/3) / 2
    assert metrics.pair_average_precision([1, 0, 1, 0], [0.9, 0.8, 0.7, 0.1]) == pytest.approx(5 / 6)
    with pytest.raises(ValueError, match="both positive and negative"):
        metrics.pair_average_precision([1, 1], [0.2, 0.3])


def test_logistic_regression_accuracy_counts_test_errors():
    train_x = np.array([[0, 0], [0, 1], [1, 0], [10, 10], [10, 11], [11, 10]], dtype=float)
    train_y = ["a", "a", "a", "b", "b", "b"]
    test_x = np.array([[0.5, 0.5], [10.5, 10.5], [0, 0.2], [9, 9]])
    assert metrics.logistic_regression_accuracy(train_x, train_y, test_x, ["a", "b", "a", "b"]) == 1.0
    assert metrics.logistic_regression_accuracy(train_x, train_y, test_x, ["a", "b", "a", "a"]) == 0.75


def test_kmeans_v_measure():
    x = np.array([[0, 0], [0, 0.1], [5, 5], [5, 5.1], [-5, 5], [-5, 5.1]])
    assert metrics.kmeans_v_measure(x, ["p", "p", "q", "q", "r", "r"]) == pytest.approx(1.0)
    # two gold classes that coincide in space cannot both be recovered: v-measure strictly below 1
    assert metrics.kmeans_v_measure(x, ["p", "q", "p", "q", "r", "r"]) < 0.8
    with pytest.raises(ValueError, match="at least 2 distinct labels"):
        metrics.kmeans_v_measure(x, ["p"] * 6)


def test_classification_scores_average_balanced_experiments():
    """An imbalanced train split where one label is 95 % of the texts: a classifier fit on the whole split predicts
    the majority label everywhere, MTEB's balanced draws do not (the score separates models)."""
    from embedforge.data.schema import LabelledText
    from embedforge.evaluate.scoring import score_task
    from embedforge.evaluate.tasks import ClassificationTask

    class Lookup:
        name, dimension = "lookup", 2

        def __init__(self) -> None:
            self.encoded: list[str] = []

        def encode_queries(self, texts, task=None, batch_size=32, examples=()):
            self.encoded += texts
            rng = np.random.default_rng(0)
            return np.array([[float(t.startswith("pos")), 0.0] for t in texts]) + rng.normal(0, 0.7, (len(texts), 2))

    train = [LabelledText(f"{'pos' if i % 20 == 0 else 'neg'} {i}", "p" if i % 20 == 0 else "n") for i in range(400)]
    test = [LabelledText(f"{'pos' if i % 2 else 'neg'} test {i}", "p" if i % 2 else "n") for i in range(100)]
    encoder = Lookup()
    task = ClassificationTask("c", "", train=train, test=test, samples_per_label=8, experiments=4)
    scores = score_task(task, encoder)
    assert scores["experiments"] == 4 and scores["num_test"] == 100
    assert 16 <= scores["num_train"] <= 64 and len(encoder.encoded) == scores["num_train"] + 100
    assert scores["accuracy"] > 0.6 and scores["accuracy_std"] >= 0
    whole = metrics.logistic_regression_accuracy(
        encoder.encode_queries([x.text for x in train]),
        [x.label for x in train],
        encoder.encode_queries([x.text for x in test]),
        [x.label for x in test],
    )
    assert whole < scores["accuracy"]
