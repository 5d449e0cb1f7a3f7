"""Documents in, an embedder served: the documents profile end to end at tiny scale (plumbing, random weights).

A random-weight generator writes the queries, the starting model (tiny-bert, a sentence-transformers folder) and
MiniLM rank the whole collection, the starting model's query side is adapted by distilling their fused ranking over
the collection while its documents stay frozen (the profile's recipe), the models are evaluated on the validation
slice and on a few judged queries of the user's own, the guard decides on those queries, and the deploy step
serves the model it chose, over real HTTP; the trained model is the checkpoint that scored best on the slice, and
the collection is encoded once per model, in mining."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from embedforge.config import load_config
from embedforge.config.evaluate import TRAINED
from embedforge.data.io import read_parquet
from embedforge.evaluate.cached import CachedEncoder
from embedforge.evaluate.registry import HELDOUT_TASK
from embedforge.evaluate.run import results_dir, selection_vectors_dir
from embedforge.models.bundled import prepare
from embedforge.pipeline.probe import embed
from embedforge.pipeline.runner import run_pipeline
from embedforge.pipeline.steps import export_dir

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MINILM = "bundled:all-minilm-l6-v2"
TINY_BERT = "bundled:tiny-bert"
WORDS = ["river", "castle", "engine", "violin", "glacier", "pepper", "satellite", "harbor", "lantern", "orchard"]


def _documents(path: Path) -> Path:
    rows = [
        {"_id": f"d{i}", "title": f"{a} {b}", "text": f"A note on the {a} and the {b}, number {i}, for the test."}
        for i, (a, b) in enumerate((a, b) for a in WORDS for b in WORDS[:4])
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _judged_queries(folder: Path, docs: Path) -> Path:
    """A user's few judged queries as a BEIR folder over the collection: each names the two words of one document."""
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(docs.read_text())
    rows = [json.loads(line) for line in docs.read_text().splitlines()][::7]
    queries = "".join(json.dumps({"_id": f"q{i}", "text": f"the {r['title']}"}) + "\n" for i, r in enumerate(rows))
    (folder / "queries.jsonl").write_text(queries)
    qrels = "".join(f"q{i}\t{r['_id']}\t1\n" for i, r in enumerate(rows))
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return folder


def test_documents_profile_from_a_collection_to_a_served_encoder(ray_cluster, tmp_path) -> None:
    prepare(["tiny-llama-vllm", "tiny-bert", "all-minilm-l6-v2"])
    docs = str(_documents(tmp_path / "docs.jsonl"))
    judged = _judged_queries(tmp_path / "judged", Path(docs))
    config = load_config(
        REPO / "configs" / "tiny.yaml",
        [
            "model.backbone=bundled:tiny-bert",
            "model.pooling=auto",
            "model.bidirectional=null",
            "model.lora.enabled=false",
            "model.frozen_documents=true",
            "model.max_doc_length=256",  # the folder's own: its documents are the starting model's vectors
            'model.instructions.query_template=""',
            "data.sources=[{name: synthetic, kind: run, path: synth}]",
            f"synth.documents={docs}",
            "synth.max_documents=24",
            "synth.heldout_fraction=0.25",
            "synth.min_chars=1",
            "synth.max_query_tokens=8",
            "synth.max_query_chars=150",
            "synth.judge.enabled=false",
            f"mine.corpus={docs}",
            # as the profile's: each teacher's queries fed back with its own top documents
            f"mine.teachers=[{{kind: embedforge, model: {TINY_BERT}, feedback: {{depth: 3}}}}, "
            f"{{kind: sentence_transformers, model: {MINILM}, feedback: {{depth: 3}}}}]",
            "mine.selection={margin_type: none, num_negatives: 5, candidate_k: 10, sampling: top}",
            "mine.sources=[synthetic]",
            "train.stages=[{name: domain, datasets: [{source: synthetic}], steps: 3, batch_size: 4, "
            "num_negatives: 0, in_batch_negatives: false, learning_rate: 1.0e-3, warmup_steps: 0, "
            "losses: {infonce: {weight: 0}, distill: {weight: 1, over: collection, positive: top, "
            "teacher_temperature: 0.001, student_temperature: 0.05}}}]",
            "train.checkpoint_every=1",
            "train.select_checkpoint=true",
            f"evaluate.tasks=[{HELDOUT_TASK}, judged]",
            f"evaluate.custom_tasks=[{{name: judged, family: retrieval, path: {judged}}}]",
            "evaluate.deploy_guard={task: judged, min_gain: 0.005}",
            f"evaluate.baselines=[{MINILM}]",
            # one cold embedding cache for mining and evaluation, as on a fresh machine
            f"mine.cache_dir={tmp_path / 'cache'}",
            f"evaluate.cache_dir={tmp_path / 'cache'}",
            "serve.port=0",
        ],
    )
    try:
        _check_run(config, docs, tmp_path / "run")
    finally:
        # the deployed app holds the route prefix "/" and a CPU in the session's shared cluster
        from ray import serve

        serve.delete(config.serve.name)


def _check_run(config, docs: str, run_dir: Path) -> None:
    from embedforge.data.schema import TrainingExample
    from embedforge.evaluate.models import load_model
    from embedforge.model import load_encoder

    record = run_pipeline(config, run_dir)
    assert record["status"] == "complete", record

    # each query's candidates come from the collection, ranked by the two teachers' fused (RRF) scores
    collection = {
        f"{r['title']} {r['text']}" for r in (json.loads(line) for line in Path(docs).read_text().splitlines())
    }
    mined = read_parquet(run_dir / "mine" / "data", TrainingExample)
    assert mined and all(len(ex.negatives) == 5 and set(ex.negatives) <= collection for ex in mined)
    trained_positives = {ex.positive for ex in mined}
    assert any(set(ex.negatives) - trained_positives for ex in mined)
    assert all(ex.negative_scores == sorted(ex.negative_scores, reverse=True) for ex in mined)
    assert all(0 < s <= 2 / 61 for ex in mined for s in ex.negative_scores)

    # training distilled that ranking over the collection, reading every document's vector from mining's cache
    metrics = (run_dir / "train" / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    distill = [float(row.split(",")[header.index("loss_distill")]) for row in metrics[1:]]
    assert len(distill) == 3 and all(np.isfinite(distill)) and min(distill) > 0

    # every checkpoint was scored on the validation slice and the best one became the trained model
    selection = json.loads((run_dir / "train" / "manifest.json").read_text())["selection"]
    scores_by_step = {int(k): v for k, v in selection["scores"].items()}
    assert sorted(scores_by_step) == [1, 2, 3]
    assert scores_by_step[selection["selected_step"]] == max(scores_by_step.values())

    # evaluation read the collection's vectors that mining wrote, MiniLM's and the starting model's; only the
    # held-out queries were encoded
    heldout_queries = (run_dir / "synth" / "heldout" / "queries.jsonl").read_text().splitlines()
    for model in (MINILM, TINY_BERT):
        result = json.loads((results_dir(run_dir / "evaluate", model) / f"{HELDOUT_TASK}.json").read_text())
        assert result["texts"]["from_cache"] >= len(collection), (model, result["texts"])
        assert result["texts"]["encoded"] <= len(heldout_queries), (model, result["texts"])

    # the selected checkpoint's vectors of the validation slice (here the whole collection) are the trained model's
    # own, and evaluation did not encode them again
    trained = json.loads((results_dir(run_dir / "evaluate", TRAINED) / f"{HELDOUT_TASK}.json").read_text())
    assert trained["texts"] == {"from_cache": trained["texts"]["from_cache"], "encoded": 0}, trained["texts"]
    assert trained["texts"]["from_cache"] >= len(collection)
    model_ref = str(run_dir / "train" / "model")
    cached = CachedEncoder(load_model(model_ref, config.model), model_ref, config.evaluate.cache_dir)
    seeded = json.loads((selection_vectors_dir(run_dir) / "index.json").read_text())
    documents = next(entry["texts"] for entry in seeded if entry["side"] == "document")[:8]
    own = load_model(model_ref, config.model).encode_documents(documents)
    np.testing.assert_allclose(cached.encode_documents(documents), own, atol=1e-5)
    assert cached.misses == 0
    # the trained model's documents are the starting model's vectors; its queries are its own
    start = load_encoder(TINY_BERT)
    np.testing.assert_allclose(own, start.encode_documents(documents), atol=1e-5)
    queries = [json.loads(line)["text"] for line in heldout_queries[:4]]
    assert not np.allclose(load_model(model_ref, config.model).encode_queries(queries), start.encode_queries(queries))

    # selection scored the slice as evaluation does: the selected checkpoint's score is the trained model's there
    scores = json.loads((run_dir / "evaluate" / "manifest.json").read_text())["scores"]
    assert scores[HELDOUT_TASK]["trained"] == pytest.approx(scores_by_step[selection["selected_step"]], abs=1e-6)
    # the guard decided on the user's judged queries, by its margin, and the endpoint serves the model it chose
    deploy = record["steps"]["deploy"]
    decision, judged = deploy["decision"], scores["judged"]
    assert decision["task"] == "judged"
    assert decision["trained_score"] == judged["trained"] and decision["start_score"] == judged[TINY_BERT]
    chosen = "trained" if judged["trained"] >= judged[TINY_BERT] + 0.005 else "start"
    assert decision["deploy"] == chosen
    expected = "bundled:tiny-bert" if chosen == "start" else str(export_dir(run_dir, "merged"))
    assert deploy["model"] == expected
    text = "A note on the river and the castle."
    served = np.asarray(embed(deploy["endpoint"], config, [text])[0], dtype=np.float32)
    # the starting model is served with the settings evaluation scored it with (the run's model section)
    local_model = load_model(expected, config.model) if chosen == "start" else load_encoder(expected)
    local = local_model.encode_documents([text])[0]
    assert float(served @ local) >= 0.999
