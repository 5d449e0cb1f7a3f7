"""`run_mine(config, run_dir)`: the Ray layer of hard-negative mining (issue 5, recipe section 5).

Every source is loaded once (`embedforge.data.sources.load_source`) and grouped into pools (`pools`). Then all
their texts stream through each dense teacher's Ray Data actor pool into the embedding cache (`embed_stage`), in
one pass per teacher: an actor pool's start-up costs 20-30 s on the 2-core machine, and a pass per source and
pool paid it six times in the demo (git log). Then each pool's corpus vectors are copied from the cache, chunk
by chunk, into an on-disk matrix that faiss indexes or, past `mine.search_memory_mb`, searches block by block
(`index.corpus_index`), and its queries are mined chunk by chunk (`miner`), writing one
`run_dir/mine/data/part-NNNNN.parquet` shard of TrainingExamples per chunk. Shards already on disk are skipped on
resume; the manifest records every parameter and the statistics table, which is also printed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from embedforge.config import EmbedforgeConfig
from embedforge.config.data import DataSource
from embedforge.config.mine import DENSE_KINDS, PAIRWISE_KINDS, SelectionConfig, TeacherConfig
from embedforge.data.documents import collection_texts
from embedforge.data.schema import TrainingExample
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.embeddings.cache import cache_root as embeddings_cache_root
from embedforge.mine.embed_stage import EmbedRequest, embed_into_cache
from embedforge.mine.feedback import expand_queries
from embedforge.mine.index import chunks, corpus_index
from embedforge.mine.miner import DenseView, PoolMiner, QueryResult
from embedforge.mine.pools import MiningPool, QueryKey, build_pools, query_key
from embedforge.mine.selection import merge_negatives
from embedforge.mine.stats import MiningStats
from embedforge.mine.teachers.dense import DenseIdentity
from embedforge.mine.teachers.lexical import BM25Teacher
from embedforge.runs.stage import StageRun, read_manifest
from embedforge.runs.store import PUBLISHED_EMBEDDINGS

log = logging.getLogger(__name__)
STAGE = "mine"
COPY_CHUNK = 8192


def mined_sources(config: EmbedforgeConfig) -> list[DataSource]:
    wanted = config.mine.sources
    return [s for s in config.data.sources if not wanted or s.name in wanted]


def stage_settings(config: EmbedforgeConfig) -> tuple[dict[str, Any], str]:
    """Everything that changes the output (mine section but the cache location, the mined sources, data seed)
    and its hash."""
    settings = {
        # where vectors live, how much of them search holds at once and which nodes teachers run on change nothing
        "mine": config.mine.model_dump(
            mode="json", exclude={"cache_dir": True, "search_memory_mb": True, "teachers": {"__all__": {"resources"}}}
        ),
        "sources": [s.model_dump(mode="json") for s in mined_sources(config)],
        "data_seed": config.data.seed,
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    return settings, digest


def cache_root(config: EmbedforgeConfig) -> str:
    return embeddings_cache_root(config.mine.cache_dir)


def _embed_requests(pool: MiningPool) -> list[EmbedRequest]:
    docs = [(t, "document", pool.doc_instruction) for t in pool.corpus]
    return docs + [(query, "query", instruction) for instruction, query in pool.queries()]


@dataclass
class SourcePlan:
    """One source's examples, loaded once, and its pools, each with the ids of the output shards it writes."""

    source: DataSource
    examples: list[TrainingExample]
    pools: list[tuple[MiningPool, list[int]]]
    drops: dict[str, int] = field(default_factory=dict)  # rows lost loading the source (data.sources.source_drops)


def plan_sources(
    sources: list[DataSource], run_dir: Path, seed: int, shard_size: int, collection: list[str] | None = None
) -> list[SourcePlan]:
    """Every source's pools with consecutive shard ids across sources, in configuration order. `collection`
    (`mine.corpus`): documents every retrieval pool searches besides its examples' own positives and negatives."""
    from embedforge.data.sources import load_source, source_drops

    plans, next_shard = [], 0
    for source in sources:
        converted = load_source(source, run_dir, seed=seed)
        examples = converted.examples
        pools = []
        for pool in build_pools(examples):
            if pool.doc_instruction is None:
                for text in collection or []:
                    pool.doc_id(text)
            count = math.ceil(len(pool.examples) / shard_size)
            pools.append((pool, list(range(next_shard, next_shard + count))))
            next_shard += count
        plans.append(SourcePlan(source, examples, pools, source_drops(source, converted)))
    return plans


def _dense_view(pool: MiningPool, teacher: TeacherConfig, root: str, work: Path, config: EmbedforgeConfig) -> DenseView:
    """Corpus vectors copied chunk by chunk from the cache into a `.npy` file (written, not mapped, so no more than
    a chunk is in memory), read back as a read-only memory map and searched through `corpus_index`."""
    identity = DenseIdentity(teacher)
    doc_cache = EmbeddingCache(root, identity("document", pool.doc_instruction))
    dim = doc_cache.get(pool.corpus[:1]).shape[1]
    work.parent.mkdir(parents=True, exist_ok=True)
    with work.open("wb") as f:
        header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
        np.lib.format.write_array_header_1_0(f, {**header, "shape": (len(pool.corpus), dim)})
        for part in chunks(len(pool.corpus), COPY_CHUNK):
            f.write(np.ascontiguousarray(doc_cache.get(pool.corpus[part]), dtype=np.float32).tobytes())
    vectors = np.load(work, mmap_mode="r")
    query_caches: dict[str, EmbeddingCache] = {}

    def query_vectors(keys: Sequence[QueryKey]) -> np.ndarray:
        out = np.empty((len(keys), vectors.shape[1]), dtype=np.float32)
        by_instruction: dict[str, list[int]] = {}
        for i, (instruction, _) in enumerate(keys):
            by_instruction.setdefault(instruction, []).append(i)
        for instruction, rows in by_instruction.items():
            query_identity = identity("query", instruction)
            cache = query_caches.setdefault(query_identity, EmbeddingCache(root, query_identity))
            out[rows] = cache.get([keys[i][1] for i in rows])
        return out

    index = corpus_index(work, config.mine)
    feedback = teacher.feedback
    if feedback is None:
        return DenseView(doc_vectors=vectors, index=index, query_vectors=query_vectors)

    def fed_back(keys: Sequence[QueryKey]) -> np.ndarray:
        return expand_queries(query_vectors(keys), index, vectors, feedback)

    return DenseView(doc_vectors=vectors, index=index, query_vectors=fed_back)


def _mined_example(
    ex: TrainingExample, result: QueryResult, pool: MiningPool, provenance: dict[str, Any], selection: SelectionConfig
) -> TrainingExample:
    """The example with its negatives: its own ones first when the selection keeps them (level-tagged ones, the
    generator's MGH N1..N4: `keep_given_negatives`; untagged ones such as NLI contradictions, as N1:
    `keep_untagged_negatives`), then the mined ones, each with a level and the teacher's score (NaN for a given
    negative the teacher did not score among its candidates)."""
    tagged = bool(ex.negative_levels) and len(ex.negative_levels) == len(ex.negatives)
    keep = selection.keep_given_negatives if tagged else selection.keep_untagged_negatives
    own = [i for i, text in enumerate(ex.negatives) if text.strip()] if keep else []
    given = [ex.negatives[i] for i in own]
    levels = [ex.negative_levels[i] for i in own] if tagged else []
    mined = [pool.corpus[d] for d in result.candidate_ids]
    merged = merge_negatives(given, levels, mined, result.selection.scores)
    if result.labels is not None:  # one teacher's own scores are the soft labels (mine.soft_labels_from)
        scores = [result.labels.get(pool.doc_id(n), math.nan) for n in merged]
        positive_score = result.labels[pool.doc_id(ex.positive)]
    else:  # a given negative is in the pool (build_pools adds every negative): its score, when the teacher scored it
        scores = [
            result.scores.get(pool.doc_id(n), math.nan) if math.isnan(score) else score
            for n, (_, score) in merged.items()
        ]
        positive_score = result.scores[pool.doc_id(ex.positive)]
    prov = {**ex.provenance_dict(), "mining": {**provenance, "given_negatives": len(given)}}
    return replace(
        ex,
        negatives=list(merged),
        negative_levels=[level for level, _ in merged.values()],
        negative_scores=[float(s) for s in scores],
        positive_score=float(positive_score),
        provenance=json.dumps(prov, ensure_ascii=False),
    )


class _Miner:
    """The per-run state: the stage folder, the cache root, the pairwise actor pools and the shard counter."""

    def __init__(self, config: EmbedforgeConfig, stage: StageRun) -> None:
        self.config, self.stage = config, stage
        self.root = cache_root(config)
        self.done = stage.done_shards()
        self.stats_dir = stage.dir / "stats"
        for stale in self.stats_dir.glob("part-*.json") if self.stats_dir.is_dir() else []:
            if int(stale.stem.split("-")[1]) not in self.done:  # statistics of shards that will be redone
                stale.unlink()
        self.provenance = {
            "stage_config_hash": stage.config_hash,
            "teachers": [f"{t.kind}:{t.model or ''}" for t in config.mine.teachers],
            "margin_type": config.mine.selection.margin_type,
            "margin": config.mine.selection.margin,
        }
        self.pair_pools: list[Any] = []

    def open_pairwise(self) -> None:
        from embedforge.mine.rerank_stage import PairScorerPool

        usage = self.stage.usage_location()
        self.pair_pools = [PairScorerPool(t, usage) for t in self.config.mine.teachers if t.kind in PAIRWISE_KINDS]

    def close(self) -> None:
        for pool in self.pair_pools:
            pool.close()
        self.pair_pools = []

    def embed_all(self, plans: list[SourcePlan]) -> None:
        """Encode the texts of every pool still to mine, all sources together, in one pass per dense teacher."""
        started = time.time()
        requests = [
            request
            for plan in plans
            for pool, shard_ids in plan.pools
            if not all(s in self.done for s in shard_ids)
            for request in _embed_requests(pool)
        ]
        # in a run in object storage, teacher actors on any node publish their vectors there for this driver
        publish = self.stage.store.child(PUBLISHED_EMBEDDINGS) if self.stage.store is not None else None
        for teacher in (t for t in self.config.mine.teachers if t.kind in DENSE_KINDS):
            n = embed_into_cache(requests, teacher, self.root, self.stage.usage_location(), publish)
            log.info("%d sources: %s encoded %d new texts", len(plans), teacher.model, n)
        self.stage.time("embed", time.time() - started)

    def mine_source(self, plan: SourcePlan) -> None:
        source = plan.source
        if not plan.examples:
            log.warning("source %s has no examples; nothing to mine", source.name)
        for p, (pool, shard_ids) in enumerate(plan.pools):
            if all(s in self.done for s in shard_ids):
                log.info("source %s pool %d: all %d shards done, skipping", source.name, p, len(shard_ids))
                continue
            miner = self._pool_miner(source, p, pool)
            try:
                self._mine_pool(source, pool, miner, plan.examples, shard_ids)
            finally:
                self.close()  # pairwise actors never hold CPUs while the next embedding pool needs them

    def _pool_miner(self, source: DataSource, p: int, pool: MiningPool) -> PoolMiner:
        mine = self.config.mine
        started = time.time()
        dense_teachers = [t for t in mine.teachers if t.kind in DENSE_KINDS]
        work = self.stage.dir / "work" / source.name
        views = [
            _dense_view(pool, t, self.root, work / f"pool{p}-teacher{i}.npy", self.config)
            for i, t in enumerate(dense_teachers)
        ]
        bm25 = BM25Teacher(pool.corpus) if any(t.kind == "bm25" for t in mine.teachers) else None
        self.stage.time("index", time.time() - started)
        self.open_pairwise()
        return PoolMiner(pool, mine, views, bm25, self.pair_pools)

    def _mine_pool(
        self,
        source: DataSource,
        pool: MiningPool,
        miner: PoolMiner,
        examples: list[TrainingExample],
        shard_ids: list[int],
    ) -> None:
        started = time.time()
        total = len(pool.examples)
        for shard, part in zip(shard_ids, chunks(total, self.config.mine.shard_size), strict=True):
            if shard in self.done:
                continue
            rows = [examples[i] for i in pool.examples[part]]
            keys = list(dict.fromkeys(query_key(ex) for ex in rows))
            results = dict(zip(keys, miner.mine(keys, self.config.mine.seed), strict=True))
            stats, out = MiningStats(), []
            counted: set[QueryKey] = set()
            for ex in rows:
                result = results[query_key(ex)]
                kept = len(result.selection.kept) >= self.config.mine.selection.min_negatives
                mined = _mined_example(ex, result, pool, self.provenance, self.config.mine.selection) if kept else None
                first = query_key(ex) not in counted
                counted.add(query_key(ex))
                stats.add(
                    mined.positive_score if mined else 0.0,
                    [s for s in mined.negative_scores if not math.isnan(s)] if mined else [],
                    result.selection.drops if first else {},
                    kept,
                    result.selection.round_trip_failed,
                )
                if mined is not None:
                    out.append(mined)
            self.stats_dir.mkdir(parents=True, exist_ok=True)
            (self.stats_dir / f"part-{shard:05d}.json").write_text(
                json.dumps({"source": source.name, **_stats_state(stats)})
            )
            self.stage.write_shard(shard, out, TrainingExample)
            done = part.stop
            rate = done / max(time.time() - started, 1e-9)
            log.info(
                "source %s: mined %d/%d examples (%.1f examples/s), shard %d", source.name, done, total, rate, shard
            )
        self.stage.time("mine", time.time() - started)

    def statistics(self) -> tuple[dict[str, MiningStats], MiningStats]:
        per_source: dict[str, MiningStats] = {}
        for f in sorted(self.stats_dir.glob("part-*.json")) if self.stats_dir.is_dir() else []:
            state = json.loads(f.read_text())
            per_source.setdefault(state["source"], MiningStats()).merge(_stats_from_state(state))
        total = MiningStats()
        for stats in per_source.values():
            total.merge(stats)
        return per_source, total


def _stats_state(stats: MiningStats) -> dict[str, Any]:
    return {
        "positive_scores": stats.positive_scores,
        "negative_scores": stats.negative_scores,
        "drops": dict(stats.drops),
        "inputs": stats.inputs,
        "too_few": stats.too_few,
        "round_trip": stats.round_trip,
        "examples": stats.examples,
    }


def _stats_from_state(state: dict[str, Any]) -> MiningStats:
    from collections import Counter

    return MiningStats(
        positive_scores=state["positive_scores"],
        negative_scores=state["negative_scores"],
        drops=Counter(state["drops"]),
        inputs=state["inputs"],
        too_few=state["too_few"],
        round_trip=state["round_trip"],
        examples=state["examples"],
    )


def run_mine(config: EmbedforgeConfig, run_dir: str | Path) -> dict[str, Any]:
    """Mine hard negatives for every configured source into `run_dir/mine/`; returns the manifest."""
    from embedforge.cluster.local import connect

    run_dir = Path(run_dir).resolve()
    settings, digest = stage_settings(config)
    inputs = {s.path: run_dir / s.path for s in mined_sources(config) if s.kind == "run"}
    stage = StageRun(run_dir, STAGE, settings, digest, inputs)
    if stage.is_complete():
        log.info("mine: complete for config %s, skipping", digest)
        return read_manifest(stage.dir) or {}
    if not mined_sources(config):
        raise ValueError("mine: no data sources to mine (data.sources is empty or mine.sources matches none)")
    connect(num_cpus=int(config.resources.num_cpus) if config.resources.num_cpus else None)
    stage.start()
    miner = _Miner(config, stage)
    try:
        collection = None
        if config.mine.corpus:
            collection = collection_texts(config.mine.corpus)
            log.info("mine: %d documents of %s join every retrieval pool", len(collection), config.mine.corpus)
        plans = plan_sources(mined_sources(config), run_dir, config.data.seed, config.mine.shard_size, collection)
        miner.embed_all(plans)
        for plan in plans:
            miner.mine_source(plan)
    finally:
        miner.close()
    shutil.rmtree(stage.dir / "work", ignore_errors=True)  # the corpus memory maps are rebuilt from the cache
    per_source, total = miner.statistics()
    for name, stats in per_source.items():
        print(stats.table(name))
    print(total.table("all sources"))
    return stage.complete(
        counts={"input_examples": total.inputs, "examples": total.examples, "negatives": len(total.negative_scores)},
        drops={
            "examples with too few negatives": total.too_few,
            "examples failing round-trip consistency": total.round_trip,
            **{f"candidates: {k}": v for k, v in total.drops.items()},
            **{k: v for plan in plans for k, v in plan.drops.items()},
        },
        parameters={"cache_dir": miner.root, **settings["mine"]},
        statistics={"all": total.to_dict(), **{n: s.to_dict() for n, s in per_source.items()}},
    )
