"""Exact and near-duplicate removal (real MiniLM embeddings), judge length bias and run summaries."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embedforge.synth.dedup import Deduplicator, encoder_embedder, near_duplicates
from embedforge.synth.report import length_bias, plot, summarize

REPO = Path(__file__).resolve().parents[2]


def _unit(*rows: list[float]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_near_duplicates_hand_computed() -> None:
    kept = _unit([1, 0, 0])
    new = _unit([0.99, 0.1, 0], [0, 1, 0], [0, 0.98, 0.2], [0, 0, 1])
    # cos(new0, kept0) = 0.995; cos(new2, new1) = 0.980; the rest are orthogonal
    assert near_duplicates(new, kept, 0.97) == [True, False, True, False]
    assert near_duplicates(new, kept, 0.99) == [True, False, False, False]
    assert near_duplicates(new, np.zeros((0, 3), dtype=np.float32), 0.97) == [False, False, True, False]


def test_deduplicator_with_minilm(minilm_dir) -> None:
    embed, dim = encoder_embedder(str(minilm_dir))
    assert dim == 384
    dedup = Deduplicator(embed, threshold=0.9, dimension=dim)
    first = dedup.filter(
        ["How do I reset my online banking password?", "best hiking trails near Zurich"],
        ["Open settings and choose reset.", "The Uetliberg loop is popular."],
    )
    assert first == [None, None]
    second = dedup.filter(
        [
            "how do I reset my online  banking password?",  # exact after normalisation, same positive
            "How can I reset my online banking password?",  # paraphrase: near duplicate
            "What is the boiling point of water at altitude?",
            "What is the boiling point of water at altitude?",  # exact duplicate within the batch
        ],
        [
            "open settings and choose RESET.",
            "Another answer.",
            "It drops by about 1 C per 300 m.",
            "It drops by about 1 C per 300 m.",
        ],
    )
    assert second == ["exact_duplicate", "near_duplicate", None, "exact_duplicate"]
    assert dedup.vectors.shape == (3, 384)


def test_length_bias_is_pearson() -> None:
    scores, lengths = [2, 4, 6, 8], [100, 220, 270, 400]
    expected = float(np.corrcoef(scores, lengths)[0, 1])
    assert length_bias(scores, lengths) == pytest.approx(expected)
    assert length_bias([3, 3, 3], [1, 2, 3]) is None
    assert length_bias([1, 2], [1, 2]) is None


def test_summarize_and_plot(tmp_path) -> None:
    stats = [
        {
            "counts": {"prompts": 4, "kept": 2},
            "drops": {"invalid_json": 1, "near_duplicate": 1},
            "judged": [[8, 300], [6, 200], [3, 90]],
        },
        {"counts": {"prompts": 2, "kept": 1}, "drops": {"invalid_json": 1}, "judged": [[9, 420]]},
    ]
    s = summarize(stats)
    assert s["counts"] == {"prompts": 6, "kept": 3}
    assert s["drops"] == {"invalid_json": 2, "near_duplicate": 1}
    assert s["judge"]["judged"] == 4 and s["judge"]["score_histogram"] == {"3": 1, "6": 1, "8": 1, "9": 1}
    assert s["judge"]["length_bias_pearson"] == pytest.approx(length_bias([8, 6, 3, 9], [300, 200, 90, 420]))
    png = plot(stats, tmp_path / "report.png", "test")
    assert png is not None and png.stat().st_size > 1000


def _generated_row(row_id: int, query: str, judge_score: int) -> dict:
    return {
        "status": "valid", "reason": "", "detail": "", "finish_reason": "stop", "text": "{}", "row_id": row_id,
        "query": query, "positive": f"the answer to {query}", "negatives": json.dumps([f"not {query}"]),
        "judge_score": judge_score, "judge_notes": json.dumps(["ok"]), "doc_id": "", "template": "short-long",
        "family": "short-long", "task": "Find answers", "placeholders": "{}", "kind": "retrieval",
        "prompt_tokens": 10, "output_tokens": 5, "judge_tokens": 3,
    }  # fmt: skip


def test_the_judge_threshold_drops_what_fails_the_checklist_and_counts_it(tmp_path) -> None:
    """WildBench 3.3: S' = (S - 5) * 2 must exceed synth.judge.threshold; the shipped profiles set one that drops."""
    from embedforge.config import load_config
    from embedforge.runs.stage import StageRun
    from embedforge.synth.run import _ShardWriter

    config = load_config(REPO / "configs" / "tiny.yaml", ["synth.judge.threshold=0"])
    stage = StageRun(tmp_path, "synth", {}, "h")
    stage.start()
    (tmp_path / "work" / "shards").mkdir(parents=True)
    dedup = Deduplicator(lambda texts: np.eye(8, dtype=np.float32)[[hash(t) % 8 for t in texts]], 0.999, 8)
    rows = [_generated_row(0, "kept query", 8), _generated_row(1, "borderline query", 5), _generated_row(2, "bad", 2)]
    stats = _ShardWriter(config, stage, tmp_path / "work", dedup).finalize(0, rows)
    assert stats["counts"]["kept"] == 1 and stats["drops"] == {"judge_below_threshold": 2}
    assert [q for q, _ in stats["kept_pairs"]] == ["kept query"]
    assert summarize([stats])["judge"]["judged"] == 3
    for profile in ("local.yaml", "tiny.yaml", "nv-embed-v2.yaml"):
        judge = load_config(REPO / "configs" / profile).synth.judge
        assert not judge.enabled or judge.threshold >= -6, profile  # drops at least the scores 1 and 2
