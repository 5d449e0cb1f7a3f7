"""The mteb adapter: the `mteb` package scores the tiny model on local data exactly as embedforge does."""

from __future__ import annotations

import pytest

from embedforge.config.evaluate import EvaluateConfig
from embedforge.evaluate.models import load_model
from embedforge.evaluate.mteb_adapter import MtebEncoder, to_mteb_task
from embedforge.evaluate.registry import build_task
from embedforge.evaluate.scoring import score_task


@pytest.mark.slow
def test_embedforge_scores_equal_mteb_scores(tiny_model_dir, shared_data, tmp_path, monkeypatch):
    import mteb
    import torch

    torch.set_num_threads(2)
    monkeypatch.setenv("MTEB_CACHE", str(tmp_path / "mteb"))
    config = EvaluateConfig()
    tasks = [
        build_task("stsb", config).limit(60, seed=0),
        build_task("mrpc", config).limit(60, seed=0),
        build_task("trec_dl_msmarco_subset", config).limit(4, seed=0).limit_corpus(400, seed=0),
    ]
    encoder = load_model("bundled:tiny-llama")
    ours = {t.name: score_task(t, encoder) for t in tasks}
    adapter = MtebEncoder(encoder, {t.name: t.instruction for t in tasks})
    result = mteb.evaluate(adapter, [to_mteb_task(t) for t in tasks], cache=None, show_progress_bar=False)
    theirs = {r.task_name: r.scores["test"][0] for r in result.task_results}
    assert set(theirs) == {t.name for t in tasks}
    assert theirs["stsb"]["cosine_spearman"] == pytest.approx(ours["stsb"]["cosine_spearman"], abs=1e-4)
    assert theirs["mrpc"]["cosine_ap"] == pytest.approx(ours["mrpc"]["cosine_ap"], abs=1e-4)
    trec = theirs["trec_dl_msmarco_subset"]
    for metric in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10"):
        assert trec[metric] == pytest.approx(ours["trec_dl_msmarco_subset"][metric], abs=1e-4), metric
    assert trec["map_at_1000"] == pytest.approx(ours["trec_dl_msmarco_subset"]["map"], abs=1e-4)
    assert 0 < ours["stsb"]["main_score"] < 1  # a real, non-degenerate score was compared


def test_adapter_rejects_unsupported_families(shared_data):
    with pytest.raises(TypeError, match="no mteb conversion for ClassificationTask"):
        to_mteb_task(build_task("emotion", EvaluateConfig()))
