"""Documents in, a domain embedder out, judged on real queries the run never saw (issue: a better embedder than the
user already has).

For each corpus, the documents profile (configs/documents.yaml) runs on the corpus text alone: synth (few-shot
queries from SmolLM2-135M), mine (the starting model and MiniLM rank the whole collection, each with its query fed
back, fused by RRF), train (the starting model's query side distilled to the fused ranking), then the run's own
evaluation on its validation slice and the deploy decision. Then the starting model, all-MiniLM-L6-v2 and the
trained model are scored on the corpus's real queries and qrels (every judged query, the whole 5,000-passage corpus
indexed), which no step of the run read. Each corpus starts from an empty run dir and an empty embedding cache, as
on a fresh machine (`--resume` keeps what an earlier run left), and its pipeline time is the wall time of the whole
pipeline call. Training seeds 1, 2, ... train again on the same generated queries and candidates (the run resumes
past synth and mine). Per corpus and seed it records the real-query scores, the deploy guard's slice scores and
decision, and whether the decision agrees with the real queries (deploy exactly when the trained model beats its
start by >= 0.5 nDCG@10 there). The corpora: DBpedia entities and TREC DL passages (BEIR folders), and WikiQA's
9,270 candidate sentences with its 999 answered questions (`wikiqa_retrieval`, written out as a collection file
for the run). Writes benchmarks/results/domain.json and domain.png.

    .venv/bin/python benchmarks/domain.py [--corpus dbpedia_entity_subset ...] [--seeds 3] [--set KEY=VALUE ...]
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
    from collections.abc import Sequence

    from embedforge.config import EmbedforgeConfig
    from embedforge.data.beir import BeirDataset
    from embedforge.data.schema import Query
    from embedforge.evaluate.tasks import RetrievalTask

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "documents.yaml"
MINILM = "bundled:all-minilm-l6-v2"
CORPORA = {
    "dbpedia_entity_subset": "Given a question about an entity, retrieve the Wikipedia abstract that answers it",
    "trec_dl_msmarco_subset": "Given a web search query, retrieve passages that answer the query",
    "wikiqa_retrieval": "Given a question, retrieve the Wikipedia sentence that answers it",
}
# the deployed model against its start (mean of the seeds, and the lowest seed) and against MiniLM; every run's
# guard decision matching the real queries; DBpedia's run from an empty run dir on the 2-core machine
GOALS = {
    **{f"deployed_minus_start_ndcg10_{c}": ">= 2.0" for c in CORPORA},
    **{f"deployed_minus_start_lowest_seed_ndcg10_{c}": ">= 1.0" for c in CORPORA},
    **{f"deployed_minus_minilm_ndcg10_{c}": ">= 3.0" for c in CORPORA},
    "guard_agreement": ">= 1.0",
    "pipeline_minutes_dbpedia_entity_subset": "<= 10",
}
REAL_GAIN = 0.5  # what the guard must see: the trained model beats its start by this much on the real queries
TIE_ORDERS = 16  # random orders of tied fused scores averaged in the teachers' fusion score
STAGES = ("synth", "mine", "train", "evaluate")
GUARD_TASK = "judged_queries"  # the deploy guard's task with --guard-queries: a few of the user's judged queries


def stage_seconds(run_dir: Path, stage: str) -> float:
    manifest = json.loads((run_dir / stage / "manifest.json").read_text())
    return float(manifest["finished_at"]) - float(manifest["started_at"])


def collection_file(corpus: str, folder: Path) -> str:
    """The corpus's documents as the run reads them: a BEIR folder's corpus.jsonl in the shared data, or the
    dataset's collection written to `folder`/corpus.jsonl (WikiQA's sentences are rows of its TSV files)."""
    from embedforge.data.shared import get_shared, read_shared
    from embedforge.paths import data_dir

    shared = data_dir() / get_shared(corpus).folder / "corpus.jsonl"
    if shared.is_file():
        return f"{corpus}/corpus.jsonl"
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "corpus.jsonl").open("w", encoding="utf-8") as fh:
        for doc in read_shared(corpus).corpus:
            fh.write(json.dumps({"_id": doc.doc_id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n")
    return str(folder / "corpus.jsonl")


def judged_sample(
    corpus: str, dataset: BeirDataset, purpose: str, count: int, excluded: Sequence[str] = ()
) -> list[Query]:
    """A sample of `count` of the corpus's judged real queries (`dataset`, read once by the caller), seeded by the
    corpus and `purpose`, none of `excluded`. Judged ones, because a query without a judgment in these subsets is one
    whose relevant documents the subset does not hold, where a user's own queries are about their own collection."""
    import random

    left_out = set(excluded)
    judged = {q.query_id for q in dataset.qrels if q.relevance > 0}
    candidates = [q for q in dataset.queries if q.query_id in judged and q.query_id not in left_out]
    return random.Random(f"{corpus}:{purpose}").sample(candidates, count)


def example_queries_file(corpus: str, folder: Path, count: int) -> tuple[str, list[str]]:
    """`count` judged real queries written to `folder`/example_queries.txt for `synth.example_queries`, and their
    ids, which scoring then leaves out (BM25 shows each beside the passage it ranks first, so they must be queries
    the collection answers)."""
    from embedforge.data.shared import read_shared

    picked = judged_sample(corpus, read_shared(corpus), "example_queries", count)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "example_queries.txt").write_text("".join(q.text + "\n" for q in picked), encoding="utf-8")
    return str(folder / "example_queries.txt"), sorted(q.query_id for q in picked)


def guard_queries_folder(
    corpus: str, collection: str, folder: Path, count: int, excluded: Sequence[str]
) -> tuple[str, list[str]]:
    """A user's few judged queries for the deploy guard (`evaluate.deploy_guard.task`): `count` judged real
    queries, none of `excluded`, with their qrels and the collection, written as a BEIR folder at `folder`; and
    their ids, which scoring then leaves out."""
    from embedforge.data.shared import read_shared
    from embedforge.paths import resolve_data_path

    dataset = read_shared(corpus)
    picked = judged_sample(corpus, dataset, "guard_queries", count, excluded)
    ids = {q.query_id for q in picked}
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(resolve_data_path(collection), folder / "corpus.jsonl")
    with (folder / "queries.jsonl").open("w", encoding="utf-8") as fh:
        fh.writelines(json.dumps({"_id": q.query_id, "text": q.text}, ensure_ascii=False) + "\n" for q in picked)
    qrels = [q for q in dataset.qrels if q.query_id in ids]
    rows = "".join(f"{q.query_id}\t{q.doc_id}\t{q.relevance}\n" for q in qrels)
    (folder / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows, encoding="utf-8")
    return str(folder), sorted(ids)


def guard_overrides(corpus: str, folder: str, min_gain: float) -> list[str]:
    """The deploy guard on the user's judged queries: a custom retrieval task evaluated beside the slice."""
    task = f"{{name: {GUARD_TASK}, family: retrieval, path: {folder}, instruction: {json.dumps(CORPORA[corpus])}}}"
    return [
        f"evaluate.custom_tasks=[{task}]",
        f"evaluate.tasks=[synthetic_heldout, {GUARD_TASK}]",
        f"evaluate.deploy_guard={{task: {GUARD_TASK}, min_gain: {min_gain}}}",
    ]


def real_task(corpus: str, config: EmbedforgeConfig, excluded: Sequence[str]) -> RetrievalTask:
    """The corpus's real queries, every judged one but those shown to the generator as examples."""
    from embedforge.evaluate.registry import build_task

    task, left_out = build_task(corpus, config.evaluate), set(excluded)
    task.queries = [q for q in task.queries if q.query_id not in left_out]
    return task


def corpus_overrides(corpus: str, path: str) -> list[str]:
    return [
        f"synth.documents={path}",
        f"mine.corpus={path}",
        f"synth.documents_instruction={CORPORA[corpus]}",
        "evaluate.tasks=[synthetic_heldout]",
        "evaluate.max_queries_per_task=null",
        "evaluate.max_examples_per_task=null",
    ]


def real_query_ndcg(
    models: dict[str, str], corpus: str, config: EmbedforgeConfig, excluded: Sequence[str]
) -> dict[str, list[float]]:
    """nDCG@10 x 100 of each model on each judged real query over the whole corpus (no limits), reading the
    collection's vectors the run's embedding cache holds (a model's vectors are named by its weights and settings,
    so none is another model's)."""
    from embedforge.evaluate import metrics
    from embedforge.evaluate.cached import CachedEncoder
    from embedforge.evaluate.models import load_model
    from embedforge.evaluate.run import cache_root
    from embedforge.evaluate.scoring import retrieval_rankings

    task = real_task(corpus, config, excluded)
    per_query = {}
    for name, ref in models.items():
        started = time.time()
        # loaded as evaluation loads it (the run's model settings), so it reads the vectors evaluation cached
        encoder = CachedEncoder(load_model(ref, config.model), ref, cache_root(config))
        rankings = retrieval_rankings(task, encoder, batch_size=64)
        judged = (task.qrels[q.query_id] for q in task.queries)
        per_query[name] = [100 * metrics.ndcg_at_k(r, j, 10) for r, j in zip(rankings, judged, strict=True)]
        logging.info(
            "%s on %s real queries: nDCG@10 %.2f (%.0fs)", name, corpus, mean(per_query[name]), time.time() - started
        )
    return per_query


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def judged_queries_needed(trained: Sequence[float], start: Sequence[float]) -> dict[str, float]:
    """How many judged queries a guard needs to see this run's gain: the per-query gains' standard deviation (nDCG@10
    x 100), and the number of queries whose mean gain has a standard error of REAL_GAIN, (sd / REAL_GAIN)^2."""
    import numpy as np

    sd = float(np.std(np.subtract(trained, start), ddof=1))
    return {"per_query_gain_sd": round(sd, 2), "queries_for_standard_error_of_real_gain": round((sd / REAL_GAIN) ** 2)}


def teacher_fusion_score(corpus: str, config: EmbedforgeConfig, excluded: Sequence[str]) -> float:
    """nDCG@10 x 100 on the real queries of what training distils: the mining teachers' scores of the whole corpus
    fused as mining fuses them (`mine.fusion`; the standardized mean here standardises over the whole corpus,
    mining over a query's candidates), each teacher's vectors of the corpus read from the run's embedding cache,
    where mining put them, and its query vectors fed back as mining feeds them (`feedback`); tied fused scores are
    scored in TIE_ORDERS random orders and averaged."""
    import numpy as np

    from embedforge.config.mine import DENSE_KINDS
    from embedforge.embeddings.cache import EmbeddingCache
    from embedforge.evaluate import metrics
    from embedforge.mine.feedback import expand_queries
    from embedforge.mine.fusion import fuse
    from embedforge.mine.index import build_index
    from embedforge.mine.run import cache_root
    from embedforge.mine.teachers.dense import DenseIdentity, encode_side, load_dense_teacher

    task = real_task(corpus, config, excluded)
    sides = {"query": [q.text for q in task.queries], "document": [d.embedded_text for d in task.corpus]}
    teacher_scores = []
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
        teacher_scores.append(queries @ vectors["document"].T)
    rows, ids = list(range(len(task.corpus))), [d.doc_id for d in task.corpus]
    rng = np.random.default_rng(0)
    per_query = []
    for i, q in enumerate(task.queries):
        fused = fuse(rows, [scores[i] for scores in teacher_scores], config.mine.fusion, config.mine.rrf_k)
        # RRF ties are common (ranks (a, b) and (b, a) sum alike) and the distillation target weighs tied documents
        # alike, so no order of them is what training learns: the score is the mean over random orders of the ties
        orders = (np.lexsort((rng.permutation(len(rows)), -fused))[:10] for _ in range(TIE_ORDERS))
        per_query.append(mean([metrics.ndcg_at_k([ids[d] for d in top], task.qrels[q.query_id], 10) for top in orders]))
    return 100 * float(np.mean(per_query))


def guard_agrees(record: dict) -> bool:
    """The guard's decision matches the real queries: it deploys the trained model exactly when that model beats
    its start there by REAL_GAIN or more."""
    gain = record["ndcg10"]["trained"] - record["ndcg10"]["start"]
    return (record["ndcg10"]["deployed"] == record["ndcg10"]["trained"]) == (gain >= REAL_GAIN)


def summarize(runs: dict[str, dict]) -> dict:
    """A corpus's seeds: the mean of each score (the plot's and the table's numbers) and how often it deployed."""
    import numpy as np

    keys = runs[next(iter(runs))]["ndcg10"]
    return {
        "ndcg10": {k: round(float(np.mean([r["ndcg10"][k] for r in runs.values()])), 2) for k in keys},
        "deployed_trained": sum(r["ndcg10"]["deployed"] == r["ndcg10"]["trained"] for r in runs.values()),
        "seeds": runs,
    }


def ratios_of(results: dict[str, dict]) -> dict[str, float]:
    ratios: dict[str, float] = {}
    for corpus, result in results.items():
        runs = list(result["seeds"].values())
        gains = [r["ndcg10"]["deployed"] - r["ndcg10"]["start"] for r in runs]
        ratios[f"deployed_minus_start_ndcg10_{corpus}"] = round(sum(gains) / len(gains), 2)
        ratios[f"deployed_minus_start_lowest_seed_ndcg10_{corpus}"] = round(min(gains), 2)
        ratios[f"trained_minus_start_ndcg10_{corpus}"] = round(
            sum(r["ndcg10"]["trained"] - r["ndcg10"]["start"] for r in runs) / len(runs), 2
        )
        ratios[f"deployed_minus_minilm_ndcg10_{corpus}"] = round(
            sum(r["ndcg10"]["deployed"] - r["ndcg10"]["minilm"] for r in runs) / len(runs), 2
        )
        ratios[f"pipeline_minutes_{corpus}"] = round(result["seeds"]["0"]["pipeline_seconds"] / 60, 1)
        needed = [
            r["guard_queries_needed"]["queries_for_standard_error_of_real_gain"]
            for r in runs
            if "guard_queries_needed" in r
        ]
        if needed:  # recorded since the per-query scores are
            ratios[f"guard_judged_queries_needed_{corpus}"] = round(sum(needed) / len(needed))
    every_run = [r for result in results.values() for r in result["seeds"].values()]
    ratios["guard_agreement"] = round(sum(map(guard_agrees, every_run)) / len(every_run), 2)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", action="append", choices=sorted(CORPORA), help="default: all three")
    parser.add_argument("--seeds", type=int, default=3, help="training seeds per corpus (0, 1, ...)")
    parser.add_argument("--runs", type=Path, default=Path("runs/domain"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--resume", action="store_true", help="keep an earlier run's stages and embedding cache")
    parser.add_argument(
        "--example-queries",
        type=int,
        default=0,
        help="write this many of each corpus's judged real queries as synth.example_queries and leave them out of "
        "the scoring; the style `examples` must be set to use them",
    )
    parser.add_argument(
        "--guard-queries",
        type=int,
        default=0,
        help="give the deploy guard this many of each corpus's judged real queries (evaluate.deploy_guard.task, "
        "with min_gain REAL_GAIN / 100) and leave them out of the scoring",
    )
    parser.add_argument(
        "--experiment",
        help="record this run as a named experiment beside the profile's own result (kept, whatever it scores)",
    )
    args = parser.parse_args()
    # a corpus run alone keeps the other corpora's results when they ran the same recipe (config and overrides)
    shown = {"example_queries": args.example_queries} if args.example_queries else {}
    shown |= {"guard_queries": args.guard_queries} if args.guard_queries else {}
    protocol = json.dumps({"overrides": args.overrides, "seeds": args.seeds, **shown})
    recipe = hashlib.sha256((CONFIG.read_text() + protocol).encode()).hexdigest()[:12]
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
    results = {}
    for corpus in args.corpus or list(CORPORA):
        run_dir = (args.runs / corpus).resolve()
        if not args.resume:
            shutil.rmtree(run_dir, ignore_errors=True)
        # one cold embedding cache for mining and evaluation, as on a fresh machine
        cache = [f"{stage}.cache_dir={run_dir / 'embedding-cache'}" for stage in ("mine", "evaluate")]
        collection = collection_file(corpus, run_dir / "collection")
        base = corpus_overrides(corpus, collection) + cache + args.overrides
        excluded: list[str] = []
        if args.example_queries:
            examples, excluded = example_queries_file(corpus, run_dir / "collection", args.example_queries)
            base.append(f"synth.example_queries={examples}")
        guard_ids: list[str] = []
        if args.guard_queries:
            folder, guard_ids = guard_queries_folder(
                corpus, collection, run_dir / "collection" / "guard", args.guard_queries, excluded
            )
            base += guard_overrides(corpus, folder, REAL_GAIN / 100)
        excluded = excluded + guard_ids
        runs, baselines = {}, None
        for seed in range(args.seeds):
            config = load_config(str(CONFIG), [*base, f"train.seed={seed}"])
            started = time.time()
            run_pipeline(config, run_dir, skip=("deploy",), config_source=str(CONFIG))
            pipeline_s = time.time() - started
            # each stage's own start and finish (a resumed stage counts from its last start)
            stage_s = {stage: stage_seconds(run_dir, stage) for stage in STAGES}
            decision = deploy_decision(config, run_dir)
            start = starting_model(config)  # the deploy guard's start: a decoder as pretrained, causal attention
            if baselines is None:  # the same for every seed: the start, MiniLM and the teachers' fusion
                models = {"start": start} | ({"minilm": MINILM} if start != MINILM else {})
                baselines = real_query_ndcg(models, corpus, config, excluded)
                baselines.setdefault("minilm", baselines["start"])
                fusion = teacher_fusion_score(corpus, config, excluded)
            trained = real_query_ndcg({"trained": str(run_dir / "train" / "model")}, corpus, config, excluded)
            scores = {name: mean(values) for name, values in (baselines | trained).items()}
            scores["teachers_fusion"] = round(fusion, 2)
            deployed = "trained" if decision is None or decision.deploy == "trained" else "start"
            runs[str(seed)] = record = {
                "ndcg10": {**scores, "deployed": scores[deployed]},
                "deploy_decision": decision.as_dict() if decision else None,
                "pipeline_seconds": round(pipeline_s, 1),
                "stage_seconds": {k: round(v, 1) for k, v in stage_s.items()},
                "synth": json.loads((run_dir / "synth" / "manifest.json").read_text()).get("counts"),
                "mine": json.loads((run_dir / "mine" / "manifest.json").read_text()).get("counts"),
                "validation_slice_ndcg10": json.loads((run_dir / "evaluate" / "manifest.json").read_text())["scores"],
                "guard_queries_needed": judged_queries_needed(trained["trained"], baselines["start"]),
            }
            record["guard_agrees"] = guard_agrees(record)
            logging.info(
                "%s seed %d: trained %.2f, start %.2f, deployed %s (guard %s the real queries)",
                corpus, seed, scores["trained"], scores["start"], deployed,
                "agrees with" if record["guard_agrees"] else "disagrees with",
            )  # fmt: skip
        results[corpus] = {"recipe": recipe, **summarize(runs)}
        if args.example_queries:
            results[corpus]["example_queries"] = {"shown": args.example_queries}
        if args.guard_queries:
            results[corpus]["guard_queries"] = {"judged": args.guard_queries, "ids": guard_ids}
        if excluded:
            results[corpus]["left_out_of_scoring"] = excluded
    if args.experiment:
        entry = {"overrides": args.overrides, "date": machine["date"], "results": results, "ratios": ratios_of(results)}
        print(record_experiment("domain", args.experiment, entry, GOALS).read_text())
        return
    previous = previous_result("domain")
    for corpus, result in (previous.get("results") or {}).items():
        if corpus not in results and result.get("recipe") == recipe:
            results[corpus] = result
    path = write_result(
        "domain",
        {
            "machine": machine,
            "config": str(CONFIG.relative_to(CONFIG.parents[1])),
            "overrides": args.overrides,
            "protocol": "documents only during the run; nDCG@10 x 100 on every judged real query, whole corpus; "
            f"{args.seeds} training seeds per corpus on the same generated data",
            "results": results,
            "ratios": ratios_of(results),
            "goals": GOALS,
        },
    )
    plot_domain(json.loads(path.read_text()), RESULTS / "domain.png")
    print(path.read_text())


if __name__ == "__main__":
    main()
