"""benchmarks/domain.py's bookkeeping: when the deploy guard agrees with the real queries, the seeds' summary, the
ratios the issue's goals read, and the collection file a corpus without a BEIR folder is run on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def domain(load_benchmark):
    return load_benchmark("domain")


def _run(start: float, trained: float, deployed: str, minilm: float = 50.0, seconds: float = 600.0) -> dict:
    scores = {"start": start, "trained": trained, "minilm": minilm, "teachers_fusion": 55.0}
    return {"ndcg10": scores | {"deployed": scores[deployed]}, "pipeline_seconds": seconds}


def test_the_guard_agrees_when_it_deploys_exactly_the_gains_of_half_a_point(domain) -> None:
    assert domain.guard_agrees(_run(52.0, 53.0, "trained"))
    assert domain.guard_agrees(_run(52.0, 52.3, "start"))  # a gain under 0.5 is not worth a deployment
    assert domain.guard_agrees(_run(52.0, 51.0, "start"))
    assert not domain.guard_agrees(_run(52.0, 53.0, "start"))  # a real gain withheld
    assert not domain.guard_agrees(_run(52.0, 51.5, "trained"))  # a worse model deployed
    assert not domain.guard_agrees(_run(52.0, 52.2, "trained"))


def test_seeds_are_averaged_and_the_ratios_read_every_run(domain) -> None:
    dbpedia = domain.summarize({"0": _run(52.0, 55.0, "trained", seconds=540), "1": _run(52.0, 53.0, "start")})
    assert dbpedia["ndcg10"] == {
        "start": 52.0,
        "trained": 54.0,
        "minilm": 50.0,
        "teachers_fusion": 55.0,
        "deployed": 53.5,
    }
    assert dbpedia["deployed_trained"] == 1
    trec = domain.summarize({"0": _run(80.0, 80.2, "start", minilm=79.0)})
    ratios = domain.ratios_of({"dbpedia_entity_subset": dbpedia, "trec_dl_msmarco_subset": trec})
    assert ratios["deployed_minus_start_ndcg10_dbpedia_entity_subset"] == 1.5  # (3 + 0) / 2
    assert ratios["deployed_minus_start_lowest_seed_ndcg10_dbpedia_entity_subset"] == 0.0
    assert ratios["trained_minus_start_ndcg10_dbpedia_entity_subset"] == 2.0
    assert ratios["deployed_minus_minilm_ndcg10_dbpedia_entity_subset"] == 3.5
    assert ratios["pipeline_minutes_dbpedia_entity_subset"] == 9.0  # seed 0's run, from an empty run dir
    assert ratios["deployed_minus_start_ndcg10_trec_dl_msmarco_subset"] == 0.0
    assert ratios["guard_agreement"] == round(2 / 3, 2)  # seed 1 withheld a 1-point gain


def test_the_judged_queries_a_guard_needs_follow_the_spread_of_per_query_gains(domain) -> None:
    needed = domain.judged_queries_needed([60.0, 50.0, 70.0, 40.0], [55.0, 55.0, 55.0, 55.0])  # gains +5 -5 +15 -15
    assert needed == {"per_query_gain_sd": 12.91, "queries_for_standard_error_of_real_gain": 667}  # (12.91 / 0.5)^2
    run = _run(52.0, 53.0, "trained") | {"guard_queries_needed": needed}
    ratios = domain.ratios_of({"dbpedia_entity_subset": domain.summarize({"0": run, "1": _run(52.0, 52.0, "start")})})
    assert ratios["guard_judged_queries_needed_dbpedia_entity_subset"] == 667  # the runs that recorded it


def test_a_collection_without_a_beir_folder_is_written_for_the_run(domain, shared_data, tmp_path):
    assert domain.collection_file("dbpedia_entity_subset", tmp_path) == "dbpedia_entity_subset/corpus.jsonl"
    path = domain.collection_file("wikiqa_retrieval", tmp_path / "wikiqa")
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 9270 and rows[0]["_id"] == "w0" and rows[0]["text"].startswith("a glacier cave")


def test_example_queries_are_judged_real_queries_that_the_scoring_then_leaves_out(domain, shared_data, tmp_path):
    from embedforge.config import load_config
    from embedforge.synth.example_queries import read_example_queries

    path, left_out = domain.example_queries_file("trec_dl_msmarco_subset", tmp_path, 4)
    assert (path, left_out) == domain.example_queries_file("trec_dl_msmarco_subset", tmp_path, 4)  # seeded
    shown = read_example_queries(Path(path))
    config = load_config(str(domain.CONFIG), domain.corpus_overrides("trec_dl_msmarco_subset", "unused.jsonl"))
    everything = domain.real_task("trec_dl_msmarco_subset", config, [])
    scored = domain.real_task("trec_dl_msmarco_subset", config, left_out)
    texts = {q.query_id: q.text for q in everything.queries}
    assert len(shown) == len(left_out) == 4 and sorted(texts[i] for i in left_out) == sorted(shown)
    assert len(scored.queries) == len(everything.queries) - 4 == 39
    assert not {q.query_id for q in scored.queries} & set(left_out)


def test_the_guard_queries_are_a_judged_beir_folder_the_guard_decides_on_and_the_scoring_leaves_out(
    domain, shared_data, tmp_path
):
    from embedforge.config import load_config
    from embedforge.evaluate.registry import build_task

    corpus = "trec_dl_msmarco_subset"
    _, shown = domain.example_queries_file(corpus, tmp_path, 4)
    folder, guard = domain.guard_queries_folder(corpus, f"{corpus}/corpus.jsonl", tmp_path / "guard", 10, shown)
    assert guard == domain.guard_queries_folder(corpus, f"{corpus}/corpus.jsonl", tmp_path / "again", 10, shown)[1]
    assert len(guard) == 10 and not set(guard) & set(shown)
    overrides = domain.corpus_overrides(corpus, "unused.jsonl") + domain.guard_overrides(corpus, folder, 0.005)
    config = load_config(str(domain.CONFIG), overrides)
    assert (config.evaluate.deploy_guard.task, config.evaluate.deploy_guard.min_gain) == (domain.GUARD_TASK, 0.005)
    task = build_task(domain.GUARD_TASK, config.evaluate)
    assert sorted(q.query_id for q in task.queries) == guard and len(task.corpus) == 5000
    everything = domain.real_task(corpus, config, [])
    assert all(task.qrels[i] == everything.qrels[i] for i in guard)  # every judgment of each query, as shipped
    scored = domain.real_task(corpus, config, shown + guard)
    assert len(scored.queries) == len(everything.queries) - 14
