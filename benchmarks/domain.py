"""Documents in, a domain embedder out, judged on real queries the run never saw (issue: a better embedder than the
user already has).

For each corpus, the documents profile (configs/documents.yaml) runs on the corpus text alone: synth (few-shot
queries from SmolLM2-135M), mine (the starting model and MiniLM rank the whole collection, each with its query fed
back, fused by RRF), train (the starting model's query side distilled to the fused ranking), then the run's own
evaluation on its validation slice and the deploy decision. Then the starting model, all-MiniLM-L6-v2 and the
trained model are scored on the corpus's real queries and qrels (every judged query, the whole 5,000-passage corpus
indexed), which no step of the run read. Each corpus starts from an empty run dir and an empty embedding cache, as
on a fresh machine (`--resume` keeps what an earlier run left), and its pipeline time is the wall time of the whole
pipeline call. Writes benchmarks/results/domain.json and domain.png.

    .venv/bin/python benchmarks/domain.py [--corpus dbpedia_entity_subset ...] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedforge.config import EmbedforgeConfig

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "documents.yaml"
MINILM = "bundled:all-minilm-l6-v2"
CORPORA = {
    "dbpedia_entity_subset": "Given a question about an entity, retrieve the Wikipedia abstract that answers it",
    "trec_dl_msmarco_subset": "Given a web search query, retrieve passages that answer the query",
}
GOALS = {"dbpedia_entity_subset": 3.0, "trec_dl_msmarco_subset": 1.0}
BUDGET_S = 20 * 60
STAGES = ("synth", "mine", "train", "evaluate")


def stage_seconds(run_dir: Path, stage: str) -> float:
    manifest = json.loads((run_dir / stage / "manifest.json").read_text())
    return float(manifest["finished_at"]) - float(manifest["started_at"])


def corpus_overrides(corpus: str) -> list[str]:
    path = f"{corpus}/corpus.jsonl"
    return [
        f"synth.documents={path}",
        f"mine.corpus={path}",
        f"synth.documents_instruction={CORPORA[corpus]}",
        "evaluate.tasks=[synthetic_heldout]",
        "evaluate.max_queries_per_task=null",
        "evaluate.max_examples_per_task=null",
    ]


def real_query_scores(models: dict[str, str], corpus: str, config: EmbedforgeConfig) -> dict[str, float]:
    """nDCG@10 x 100 of each model on every judged real query over the whole corpus (no limits), reading the
    collection's vectors the run's embedding cache holds (a model's vectors are named by its weights and settings,
    so none is another model's)."""
    from embedforge.evaluate.cached import CachedEncoder
    from embedforge.evaluate.models import load_model
    from embedforge.evaluate.registry import build_task
    from embedforge.evaluate.run import cache_root
    from embedforge.evaluate.scoring import score_task

    task = build_task(corpus, config.evaluate)
    scores = {}
    for name, ref in models.items():
        started = time.time()
        # loaded as evaluation loads it (the run's model settings), so it reads the vectors evaluation cached
        encoder = CachedEncoder(load_model(ref, config.model), ref, cache_root(config))
        scores[name] = 100 * float(score_task(task, encoder, batch_size=64)["main_score"])
        logging.info("%s on %s real queries: nDCG@10 %.2f (%.0fs)", name, corpus, scores[name], time.time() - started)
    return scores


def teacher_fusion_score(corpus: str, config: EmbedforgeConfig) -> float:
    """nDCG@10 x 100 on the real queries of what training distils: the mining teachers' rankings of the whole corpus
    fused by RRF (`mine.rrf_k`), each teacher's vectors of the corpus read from the run's embedding cache, where
    mining put them, and its query vectors fed back as mining feeds them (`feedback`)."""
    import numpy as np

    from embedforge.config.mine import DENSE_KINDS
    from embedforge.embeddings.cache import EmbeddingCache
    from embedforge.evaluate import metrics
    from embedforge.evaluate.registry import build_task
    from embedforge.mine.feedback import expand_queries
    from embedforge.mine.index import build_index
    from embedforge.mine.run import cache_root
    from embedforge.mine.teachers.dense import DenseIdentity, encode_side, load_dense_teacher

    task = build_task(corpus, config.evaluate)
    sides = {"query": [q.text for q in task.queries], "document": [d.embedded_text for d in task.corpus]}
    fused = np.zeros((len(task.queries), len(task.corpus)))
    for teacher in (t for t in config.mine.teachers if t.kind in DENSE_KINDS):
        identity, vectors = DenseIdentity(teacher), {}
        for side, texts in sides.items():
            cache = EmbeddingCache(cache_root(config), identity(side, None))
            missing = [texts[i] for i in cache.missing(texts)]
            if missing:
                cache.put(missing, encode_side(load_dense_teacher(teacher), missing, side, None, 64))
            vectors[side] = cache.get(texts)
        queries = vectors["query"]
        if teacher.feedback is not None:
            index = build_index(vectors["document"], config.mine)
            queries = expand_queries(queries, index, vectors["document"], teacher.feedback)
        ranks = np.argsort(np.argsort(-(queries @ vectors["document"].T), axis=1), axis=1)
        fused += 1.0 / (config.mine.rrf_k + ranks + 1)
    ids = [d.doc_id for d in task.corpus]
    top = np.argsort(-fused, axis=1)[:, :10]
    judged = [task.qrels[q.query_id] for q in task.queries]
    per_query = [metrics.ndcg_at_k([ids[d] for d in row], qrels, 10) for row, qrels in zip(top, judged, strict=True)]
    return 100 * float(np.mean(per_query))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="default: both")
    parser.add_argument("--runs", type=Path, default=Path("runs/domain"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--resume", action="store_true", help="keep an earlier run's stages and embedding cache")
    parser.add_argument(
        "--experiment",
        help="record this run as a named experiment beside the profile's own result (kept, whatever it scores)",
    )
    args = parser.parse_args()
    # a corpus run alone keeps the other corpus's result when it ran the same recipe (config file and overrides)
    recipe = hashlib.sha256((CONFIG.read_text() + json.dumps(args.overrides)).encode()).hexdigest()[:12]
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import RESULTS, machine_info, previous_result, record_experiment, write_result
    from quality_plots import plot_domain

    from embedforge.cluster.local import start_private_cluster
    from embedforge.config import load_config
    from embedforge.pipeline.runner import run_pipeline
    from embedforge.pipeline.steps import deploy_decision, starting_model

    torch.set_num_threads(2)
    machine = machine_info()
    # a private cluster: never join a development head another process left running on this machine
    start_private_cluster(2, 1024**3)
    results, ratios = {}, {}
    for corpus in args.corpus or list(CORPORA):
        run_dir = (args.runs / corpus).resolve()
        if not args.resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        # one cold embedding cache for mining and evaluation, as on a fresh machine
        cache = [f"{stage}.cache_dir={run_dir / 'embedding-cache'}" for stage in ("mine", "evaluate")]
        config = load_config(str(CONFIG), corpus_overrides(corpus) + cache + args.overrides)
        started = time.time()
        run_pipeline(config, run_dir, skip=("deploy",), config_source=str(CONFIG))
        pipeline_s = time.time() - started
        # each stage's own start and finish (a resumed stage counts from its last start)
        stage_s = {stage: stage_seconds(run_dir, stage) for stage in STAGES}
        decision = deploy_decision(config, run_dir)
        start = starting_model(config)  # the deploy guard's start: a decoder as pretrained, with causal attention
        models = {"start": start, "trained": str(run_dir / "train" / "model")}
        if start != MINILM:
            models["minilm"] = MINILM
        scores = real_query_scores(models, corpus, config)
        scores.setdefault("minilm", scores["start"])
        scores["teachers_rrf"] = round(teacher_fusion_score(corpus, config), 2)
        deployed = "trained" if decision is None or decision.deploy == "trained" else "start"
        results[corpus] = {
            "recipe": recipe,
            "ndcg10": {**scores, "deployed": scores[deployed]},
            "deploy_decision": decision.as_dict() if decision else None,
            "pipeline_seconds": round(pipeline_s, 1),
            "stage_seconds": {k: round(v, 1) for k, v in stage_s.items()},
            "synth": json.loads((run_dir / "synth" / "manifest.json").read_text()).get("counts"),
            "mine": json.loads((run_dir / "mine" / "manifest.json").read_text()).get("counts"),
            "validation_slice_ndcg10": json.loads((run_dir / "evaluate" / "manifest.json").read_text())["scores"],
        }
        ratios[f"trained_minus_minilm_ndcg10_{corpus}"] = round(scores["trained"] - scores["minilm"], 2)
        ratios[f"deployed_minus_minilm_ndcg10_{corpus}"] = round(scores[deployed] - scores["minilm"], 2)
        ratios[f"pipeline_minutes_{corpus}"] = round(pipeline_s / 60, 1)
    goals = {
        **{f"trained_minus_minilm_ndcg10_{c}": f">= {g}" for c, g in GOALS.items()},
        **{f"pipeline_minutes_{c}": f"<= {BUDGET_S // 60}" for c in CORPORA},
    }
    if not args.experiment:
        previous = previous_result("domain")
        for corpus, result in (previous.get("results") or {}).items():
            if corpus not in results and result.get("recipe") == recipe:
                results[corpus] = result
                ratios.update({k: v for k, v in previous["ratios"].items() if k.endswith(corpus)})
    if args.experiment:
        entry = {"overrides": args.overrides, "date": machine["date"], "results": results, "ratios": ratios}
        print(record_experiment("domain", args.experiment, entry, goals).read_text())
        return
    path = write_result(
        "domain",
        {
            "machine": machine,
            "config": str(CONFIG.relative_to(CONFIG.parents[1])),
            "overrides": args.overrides,
            "protocol": "documents only during the run; nDCG@10 x 100 on every judged real query, whole corpus",
            "results": results,
            "ratios": ratios,
            "goals": goals,
        },
    )
    plot_domain(json.loads(path.read_text()), RESULTS / "domain.png")
    print(path.read_text())


if __name__ == "__main__":
    main()
