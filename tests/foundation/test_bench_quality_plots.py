"""benchmarks/quality_plots.py draws the committed quality results, whatever the deploy decision."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def quality_plots(load_benchmark):
    return load_benchmark("quality_plots")


@pytest.mark.parametrize("name", ["generalize", "domain"])
def test_each_committed_result_is_drawn(quality_plots, tmp_path, name) -> None:
    result = json.loads((REPO / "benchmarks" / "results" / f"{name}.json").read_text())
    out = tmp_path / f"{name}.png"
    quality_plots.PLOTS[name](result, out)
    assert out.read_bytes().startswith(PNG_SIGNATURE) and out.stat().st_size > 10_000


def test_a_corpus_whose_start_stays_deployed_is_drawn(quality_plots, tmp_path) -> None:
    scores = {"start": 80.6, "minilm": 79.8, "teachers_fusion": 81.9, "trained": 81.1}
    seeds = {"0": {"ndcg10": scores | {"deployed": 80.6}}}
    result = {"results": {"trec_dl_msmarco_subset": {"ndcg10": scores, "deployed_trained": 0, "seeds": seeds}}}
    out = tmp_path / "domain.png"
    quality_plots.plot_domain(result, out)
    assert out.read_bytes().startswith(PNG_SIGNATURE)


def test_a_result_without_the_scores_it_plots_fails_naming_them(quality_plots, tmp_path) -> None:
    result = {"results": {"dbpedia_entity_subset": {"ndcg10": {"start": 52.6, "trained": 54.3}}}}
    with pytest.raises(KeyError, match="minilm"):
        quality_plots.plot_domain(result, tmp_path / "domain.png")
