"""Report: Borda count (LGAI 5.1), family averages, deltas, Markdown / JSON / PNG files."""

from __future__ import annotations

import json

import pytest

from embedforge.evaluate.report import borda, build_report, to_markdown, write_report


def _result(family: str, metric: str, score: float) -> dict:
    return {"family": family, "main_metric": metric, "main_score": score, "metrics": {metric: score}}


RESULTS = {
    "A": {
        "sts1": _result("sts", "cosine_spearman", 0.8),
        "sts2": _result("sts", "cosine_spearman", 0.6),
        "ret": _result("retrieval", "ndcg_at_10", 0.3),
    },
    "B": {
        "sts1": _result("sts", "cosine_spearman", 0.7),
        "sts2": _result("sts", "cosine_spearman", 0.6),
        "ret": _result("retrieval", "ndcg_at_10", 0.5),
    },
    "C": {
        "sts1": _result("sts", "cosine_spearman", 0.1),
        "sts2": _result("sts", "cosine_spearman", 0.2),
        "ret": _result("retrieval", "ndcg_at_10", 0.1),
    },
}


def test_borda_points_with_ties():
    scores = {"t1": {"A": 0.8, "B": 0.7, "C": 0.1}, "t2": {"A": 0.6, "B": 0.6, "C": 0.2}}
    # t1: A beats 2, B beats 1, C 0; t2: A and B beat C and tie with each other (0.5 each)
    assert borda(scores, ["A", "B", "C"]) == {"A": 3.5, "B": 2.5, "C": 0.0}


def test_report_families_ranking_and_deltas():
    report = build_report(RESULTS, baseline="C")
    assert report["families"]["sts"] == pytest.approx({"A": 0.7, "B": 0.65, "C": 0.15})
    assert report["families"]["retrieval"] == pytest.approx({"A": 0.3, "B": 0.5, "C": 0.1})
    assert report["borda"] == {"A": 4.5, "B": 4.5, "C": 0.0}
    assert report["ranking"] == ["B", "A", "C"]  # Borda tie broken by the average main score
    assert report["deltas"]["A"]["ret"] == pytest.approx(0.2)
    assert set(report["deltas"]) == {"A", "B"}
    with pytest.raises(ValueError, match="baseline 'Z' was not evaluated"):
        build_report(RESULTS, baseline="Z")


def test_markdown_json_and_png_are_written(tmp_path):
    report = build_report(RESULTS, baseline="C")
    paths = write_report(report, tmp_path)
    markdown = paths["markdown"].read_text()
    assert "| sts1 | sts | - | cosine_spearman | 80.00 | 70.00 | 10.00 |" in markdown
    assert "| 1 | B | 4.5 | 60.00 |" in markdown
    assert "## Deltas vs `C`" in markdown and "| ret | +20.00 | +40.00 |" in markdown
    assert json.loads(paths["json"].read_text())["ranking"] == ["B", "A", "C"]
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert to_markdown(build_report(RESULTS)).count("Deltas") == 0


def test_left_out_and_in_distribution_tasks_are_labelled_and_averaged_apart():
    report = build_report(RESULTS, provenance={"sts1": "in-distribution", "sts2": "left out", "ret": "left out"})
    assert report["tasks"]["sts1"]["data"] == "in-distribution"
    assert report["average_by_data"]["left out"]["A"] == pytest.approx((0.6 + 0.3) / 2)
    assert report["average_by_data"]["in-distribution"]["B"] == pytest.approx(0.7)
    markdown = to_markdown(report)
    assert "| sts2 | sts | left out | cosine_spearman |" in markdown
    assert "**average (left out tasks)** | 45.00 | 55.00 | 15.00 |" in markdown
