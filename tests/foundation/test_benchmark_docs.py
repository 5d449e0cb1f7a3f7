"""docs/benchmarks.md is what benchmarks/render_docs.py writes from benchmarks/results/*.json: it cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def render_docs(load_benchmark):
    return load_benchmark("render_docs")


def test_the_committed_page_equals_the_results(render_docs) -> None:
    assert (REPO / "docs" / "benchmarks.md").read_text() == render_docs.render(), (
        "docs/benchmarks.md is stale: run .venv/bin/python benchmarks/render_docs.py"
    )
    experiments = (REPO / "docs" / "experiments.md").read_text()
    assert experiments == render_docs.with_index(experiments), "docs/experiments.md's index is stale: run it too"
    assert "| batch16_profile | 2026-11-27 |" in experiments  # generalize.json's experiments are listed


def test_goals_are_judged_from_the_ratio(render_docs, tmp_path) -> None:
    result = {
        "date": "2026-01-02T03:04:05+00:00",
        "machine": {"cpu_model": "Some CPU", "cores": 2},
        "ratios": {"speedup": 1.5, "memory": 2.0, "gain": -0.45, "old_style": 0.5},
        "goals": {
            "speedup": ">= 1.0",
            "memory": "<= 1.5 (bounded)",
            "gain": "reported",
            "old_style": {"target": "x", "met": True},
        },
    }
    (tmp_path / "thing.json").write_text(json.dumps(result))
    (tmp_path / "thing.png").write_bytes(b"")
    page = render_docs.render(tmp_path)
    assert "| thing | speedup | 1.5 | >= 1.0 | yes | Some CPU, 2 cores | 2026-01-02 |" in page
    assert "| thing | memory | 2 | <= 1.5 (bounded) | no |" in page
    assert "| thing | gain | -0.45 | reported | - |" in page
    assert "| thing | old_style | 0.5 | x | yes |" in page
    assert "- [thing.png](../benchmarks/results/thing.png)" in page
