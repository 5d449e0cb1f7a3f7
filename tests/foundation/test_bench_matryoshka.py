"""benchmarks/matryoshka.py reads each model's cut sizes from the report and keys its full size by its width."""

from __future__ import annotations

import pytest

MINILM = "bundled:all-minilm-l6-v2"


@pytest.fixture
def matryoshka(load_benchmark):
    return load_benchmark("matryoshka")


def test_sizes_are_read_as_the_report_names_them(matryoshka, tmp_path):
    scores = {MINILM: 0.64, f"{MINILM}@64": 0.60, f"{MINILM}@128": 0.62, f"{MINILM}@256": 0.63}
    manifest = {"scores": {"sick": scores, "stsb": {k: v + 0.2 for k, v in scores.items()}}}
    labels = {"sick": "left out", "stsb": "in-distribution"}
    result = matryoshka.size_scores(manifest, labels, {"minilm": (MINILM, MINILM)})["minilm"]
    assert list(result) == ["64", "128", "256", "384"]  # the full size under MiniLM's own width
    assert result["384"]["ood_avg"] == 64.0 and result["64"]["ood_avg"] == 60.0  # left-out tasks only
    assert result["128"]["tasks"] == {"sick": 62.0, "stsb": 82.0}
    matryoshka.plot(
        {"plain": {"trained": result, "minilm": result, "backbone": result}, "matryoshka": {"trained": result}},
        tmp_path / "m.png",
    )
    assert (tmp_path / "m.png").stat().st_size > 10_000
