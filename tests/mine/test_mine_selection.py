"""Every selection filter on hand-made scores (NV-Embed 4.1.1 TopK-PercPos and its variants)."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.config.mine import SelectionConfig
from embedforge.mine.selection import margin_threshold, select_negatives

TEXTS = ["d0", "d1", "d2", "d3", "d4", "d5"]
SCORES = [0.90, 0.80, 0.70, 0.60, 0.50, 0.40]


def _select(config: SelectionConfig, texts=TEXTS, scores=SCORES, pos_scores=(0.8,), query="q", positives=("p",)):
    return select_negatives(texts, scores, list(pos_scores), query, list(positives), config, np.random.default_rng(0))


def test_perc_pos_drops_candidates_above_95_percent_of_the_positive():
    sel = _select(SelectionConfig(margin=0.95, num_negatives=3, candidate_k=10), pos_scores=[0.8])
    # threshold 0.76: 0.90 and 0.80 are likely false negatives
    assert [TEXTS[i] for i in sel.kept] == ["d2", "d3", "d4"]
    assert sel.scores == pytest.approx([0.70, 0.60, 0.50])
    assert sel.drops["margin"] == 2


def test_several_positives_use_the_lowest_positive_score():
    config = SelectionConfig(margin=0.95, num_negatives=3, candidate_k=10)
    one = _select(config, pos_scores=[0.9])
    two = _select(config, pos_scores=[0.9, 0.65], positives=("p", "p2"))
    three = _select(config, pos_scores=[0.95, 0.9, 0.55], positives=("p", "p2", "p3"))
    assert [TEXTS[i] for i in one.kept] == ["d1", "d2", "d3"]  # threshold 0.855
    assert [TEXTS[i] for i in two.kept] == ["d3", "d4", "d5"]  # threshold 0.6175
    assert [TEXTS[i] for i in three.kept] == ["d4", "d5"]  # threshold 0.5225: only two survive
    assert (one.drops["margin"], two.drops["margin"], three.drops["margin"]) == (1, 3, 4)
    assert margin_threshold([0.95, 0.9, 0.55], config) == pytest.approx(0.5225)


def test_absolute_margin_subtracts_from_the_lowest_positive():
    config = SelectionConfig(margin_type="absolute", margin=0.15, num_negatives=2, candidate_k=10)
    sel = _select(config, pos_scores=[0.9, 0.85])  # threshold 0.70 (inclusive)
    assert [TEXTS[i] for i in sel.kept] == ["d2", "d3"]
    assert sel.drops["margin"] == 2


def test_no_margin_keeps_the_top_candidates():
    sel = _select(SelectionConfig(margin_type="none", num_negatives=2, candidate_k=10), pos_scores=[0.1])
    assert [TEXTS[i] for i in sel.kept] == ["d0", "d1"]
    assert sum(sel.drops.values()) == 0


def test_round_trip_drops_a_query_whose_positive_ranks_too_low():
    """Promptagator 3.2: the positive (score 0.75) ranks 3rd among d0..d5, so a limit of 2 drops the query and a
    limit of 3 keeps it with its negatives; the positive itself among the candidates does not count."""
    texts, scores = ["d0", "d1", "p", "d3"], [0.9, 0.8, 0.75, 0.6]
    strict = SelectionConfig(margin_type="none", num_negatives=2, candidate_k=10, max_positive_rank=2)
    dropped = _select(strict, texts=texts, scores=scores, pos_scores=[0.75])
    assert dropped.round_trip_failed and dropped.kept == [] and sum(dropped.drops.values()) == 0
    kept = _select(strict.model_copy(update={"max_positive_rank": 3}), texts=texts, scores=scores, pos_scores=[0.75])
    assert not kept.round_trip_failed and [texts[i] for i in kept.kept] == ["d0", "d1"]
    # with several positives the best one decides
    several = _select(strict, texts=texts, scores=scores, pos_scores=[0.75, 0.95], positives=("p", "p2"))
    assert not several.round_trip_failed
    with pytest.raises(ValueError, match="max_positive_rank 20 exceeds candidate_k 10"):
        SelectionConfig(candidate_k=10, max_positive_rank=20, num_negatives=2)
    # unset, it stays out of the dump that the stage hash is computed from (completed stages stay reusable)
    assert "max_positive_rank" not in SelectionConfig().model_dump(mode="json")
    assert "keep_untagged_negatives" not in SelectionConfig().model_dump(mode="json")
    assert strict.model_dump(mode="json")["max_positive_rank"] == 2


def test_rank_range_keeps_only_the_given_ranks():
    config = SelectionConfig(margin_type="none", rank_range=(3, 4), num_negatives=3, candidate_k=10)
    sel = _select(config)
    assert [TEXTS[i] for i in sel.kept] == ["d2", "d3"]
    assert sel.drops["rank_range"] == 4


def test_rank_range_counts_ranks_after_removing_the_positive():
    config = SelectionConfig(margin_type="none", rank_range=(2, 3), num_negatives=3, candidate_k=10)
    sel = _select(config, texts=["p", "d1", "d2", "d3", "d4", "d5"])
    assert [i for i in sel.kept] == [2, 3]  # ranks: d1=1, d2=2, d3=3
    assert sel.drops["positive"] == 1


def test_min_score_drops_low_candidates():
    config = SelectionConfig(margin_type="none", min_score=0.55, num_negatives=7, candidate_k=10)
    sel = _select(config)
    assert [TEXTS[i] for i in sel.kept] == ["d0", "d1", "d2", "d3"]
    assert sel.drops["min_score"] == 2


def test_never_the_positive_the_query_or_a_duplicate():
    texts = ["the Positive", "q text", "a", "A ", "the  positive", "Q TEXT", "b"]
    scores = [0.7, 0.69, 0.6, 0.59, 0.58, 0.57, 0.5]
    config = SelectionConfig(margin_type="none", num_negatives=7, candidate_k=10)
    sel = select_negatives(texts, scores, [0.7], "q text", ["the Positive"], config)
    assert [texts[i] for i in sel.kept] == ["a", "b"]
    assert (sel.drops["positive"], sel.drops["query"], sel.drops["duplicate"]) == (1, 1, 3)


def test_random_sampling_is_seeded_and_drawn_from_survivors():
    texts = [f"d{i}" for i in range(20)]
    scores = list(np.linspace(0.7, 0.1, 20))
    config = SelectionConfig(sampling="random", num_negatives=4, candidate_k=20)
    first = select_negatives(texts, scores, [0.8], "q", ["p"], config, np.random.default_rng(7))
    again = select_negatives(texts, scores, [0.8], "q", ["p"], config, np.random.default_rng(7))
    top = select_negatives(texts, scores, [0.8], "q", ["p"], config.model_copy(update={"sampling": "top"}))
    assert first.kept == again.kept
    assert len(first.kept) == 4 and first.kept == sorted(first.kept)  # kept best first
    assert first.kept != top.kept == [0, 1, 2, 3]


def test_bad_input_is_refused_with_a_clear_error():
    config = SelectionConfig()
    with pytest.raises(ValueError, match="best first"):
        select_negatives(["a", "b"], [0.1, 0.5], [0.9], "q", ["p"], config)
    with pytest.raises(ValueError, match="2 candidate texts but 1 scores"):
        select_negatives(["a", "b"], [0.1], [0.9], "q", ["p"], config)
    with pytest.raises(ValueError, match="exceeds candidate_k"):
        SelectionConfig(num_negatives=8, candidate_k=4)
    with pytest.raises(ValueError, match="start is after end"):
        SelectionConfig(rank_range=(5, 2))


def test_mined_levels_grade_the_teacher_ranking_in_four_bands():
    from embedforge.mine.selection import mined_levels

    assert mined_levels(8) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert mined_levels(1) == [1]
    assert mined_levels(0) == []


def test_mining_keeps_the_generators_level_tagged_negatives_and_the_curriculum_draws_them(tmp_path):
    """MGH 2.1 / 4.1 end to end through mining's own example builder: the synthetic negatives keep levels 1..4
    ahead of the mined ones (graded by rank band), and a `mgh` stage trains level 4 first and level 1 last."""
    import json
    import math

    from embedforge.config.train import StageConfig
    from embedforge.data.schema import TrainingExample
    from embedforge.mine.miner import QueryResult
    from embedforge.mine.pools import MiningPool
    from embedforge.mine.run import _mined_example
    from embedforge.mine.selection import Selection, merge_negatives
    from embedforge.train.batching import StagePlan

    pool = MiningPool(doc_instruction=None)
    examples = []
    for i in range(12):
        given = [f"q{i} level {level}" for level in (1, 2, 3, 4)]
        ex = TrainingExample(
            id=f"e{i}", task_name="synthetic", task_type="retrieval", instruction="", query=f"query {i}",
            positive=f"positive {i}", negatives=given, negative_levels=[1, 2, 3, 4],
        )  # fmt: skip
        for text in [ex.positive, *given]:
            pool.doc_id(text)
        mined = [pool.doc_id(f"mined {i} {r}") for r in range(2)] + [pool.doc_id(given[0])]  # the teacher found N1
        scores = {pool.doc_id(ex.positive): 0.9, **dict(zip(mined, (0.7, 0.6, 0.8), strict=True))}
        result = QueryResult(Selection(kept=[0, 1, 2], scores=[0.7, 0.6, 0.8]), mined, scores)
        out = _mined_example(ex, result, pool, {"teachers": "t"}, SelectionConfig())
        assert out.negatives == [*given, f"mined {i} 0", f"mined {i} 1"]
        assert out.negative_levels == [1, 2, 3, 4, 1, 2]
        assert out.negative_scores[0] == pytest.approx(0.8) and math.isnan(out.negative_scores[1])
        assert json.loads(out.provenance)["mining"]["given_negatives"] == 4
        replaced = _mined_example(ex, result, pool, {}, SelectionConfig(keep_given_negatives=False))
        assert replaced.negatives == [f"mined {i} 0", f"mined {i} 1", given[0]] and replaced.negative_levels == [
            1,
            2,
            3,
        ]
        examples.append(out)
    stage = StageConfig(name="s", datasets=[{"source": "synthetic"}], steps=8, batch_size=2, num_negatives=1,
                        curriculum="mgh")  # fmt: skip
    plan = StagePlan({"synthetic": examples}, stage, 1, seed=0)
    drawn = [[n.rsplit(" ", 1)[-1] for item in plan.batch(s, 0).items for n in item.negatives] for s in range(8)]
    assert drawn[0] == ["4", "4"] and drawn[-1] == ["1", "1"]
    with pytest.raises(ValueError, match="3 levels for 4 given"):
        merge_negatives(["a", "b", "c", "d"], [1, 2, 3], [], [])


def test_an_nli_premises_contradictions_survive_mining_only_when_the_selection_keeps_untagged_negatives():
    """LGAI 3 (recipe section 4): an NLI premise's contradicting hypotheses are its hard negatives. They carry no
    level, so mining replaced them with mined texts; `keep_untagged_negatives` keeps them first, as N1, with the
    teacher's score where it scored them, and the mined ones after."""
    import json
    import math

    from embedforge.data.schema import TrainingExample
    from embedforge.mine.miner import QueryResult
    from embedforge.mine.pools import MiningPool
    from embedforge.mine.run import _mined_example
    from embedforge.mine.selection import Selection

    pool = MiningPool(doc_instruction=None)
    contradictions = ["A man is sleeping.", "Nobody is outside."]
    ex = TrainingExample(
        id="nli0", task_name="snli", task_type="retrieval", instruction="", query="A man runs outside.",
        positive="A person is outdoors.", negatives=contradictions,
    )  # fmt: skip
    for text in [ex.positive, *contradictions]:
        pool.doc_id(text)
    mined = [pool.doc_id("A dog runs in a park."), pool.doc_id(contradictions[1])]
    scores = {pool.doc_id(ex.positive): 0.9, mined[0]: 0.6, mined[1]: 0.5}
    result = QueryResult(Selection(kept=[0, 1], scores=[0.6, 0.5]), mined, scores)

    replaced = _mined_example(ex, result, pool, {}, SelectionConfig())
    assert replaced.negatives == ["A dog runs in a park.", contradictions[1]]

    kept = _mined_example(ex, result, pool, {}, SelectionConfig(keep_untagged_negatives=True))
    assert kept.negatives == [*contradictions, "A dog runs in a park."]
    assert kept.negative_levels == [1, 1, 1]
    assert math.isnan(kept.negative_scores[0]) and kept.negative_scores[1:] == pytest.approx([0.5, 0.6])
    assert json.loads(kept.provenance)["mining"]["given_negatives"] == 2


def test_an_example_carries_the_soft_label_teachers_own_scores_when_one_is_named():
    """With `mine.soft_labels_from`, the positive's and every negative's label is that teacher's score (NaN where
    it scored none); the fused scores still chose the negatives."""
    import math

    from embedforge.data.schema import TrainingExample
    from embedforge.mine.miner import QueryResult
    from embedforge.mine.pools import MiningPool
    from embedforge.mine.run import _mined_example
    from embedforge.mine.selection import Selection

    pool = MiningPool(doc_instruction=None)
    ex = TrainingExample(
        id="e0", task_name="synthetic", task_type="retrieval", instruction="", query="who wrote hamlet",
        positive="Hamlet is a tragedy by Shakespeare.", negatives=["An unscored given negative."],
    )  # fmt: skip
    for text in [ex.positive, *ex.negatives]:
        pool.doc_id(text)
    mined = [pool.doc_id("Macbeth is a tragedy."), pool.doc_id("Othello is a play.")]
    fused = {pool.doc_id(ex.positive): 0.033, mined[0]: 0.030, mined[1]: 0.029}
    cosine = {pool.doc_id(ex.positive): 0.86, mined[0]: 0.88, mined[1]: 0.79}
    result = QueryResult(Selection(kept=[0, 1], scores=[0.030, 0.029]), mined, fused, cosine)
    out = _mined_example(ex, result, pool, {}, SelectionConfig(keep_untagged_negatives=True))
    assert out.positive_score == pytest.approx(0.86)
    assert math.isnan(out.negative_scores[0]) and out.negative_scores[1:] == pytest.approx([0.88, 0.79])
    plain = _mined_example(ex, QueryResult(result.selection, mined, fused), pool, {}, SelectionConfig())
    assert plain.positive_score == pytest.approx(0.033) and plain.negative_scores == pytest.approx([0.030, 0.029])
