"""`run_synth(config, run_dir)`: the thin Ray layer of the synth stage.

Step 1 brainstorms tasks per family, step 2 generates one example per (task, placeholders) or, in corpus-grounded
mode, one query with four graded negatives per user document (NV-Embed, seed 000, 4.3; MGH, seed 002, 2.1). Both
steps run as Ray Data `map_batches` over an actor pool of vLLM engines (`worker.SynthWorker`); the driver then
applies the judge threshold (WildBench, seed 001, 3.3), removes duplicates and writes one shard per `shard_size`
prompts, so an interrupted run resumes at the first missing shard.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from embedforge.config import EmbedforgeConfig
from embedforge.data.documents import iter_documents, sample_documents
from embedforge.data.schema import CorpusDocument, Query, TrainingExample
from embedforge.evaluate.registry import HELDOUT_TASK_FILE
from embedforge.paths import resolve_data_path
from embedforge.runs.stage import StageRun, read_manifest
from embedforge.synth.dedup import Deduplicator, encoder_embedder
from embedforge.synth.engine import EngineSettings
from embedforge.synth.example_queries import EXAMPLES_STYLE, example_demonstrations, read_example_queries
from embedforge.synth.heldout import is_heldout, write_beir
from embedforge.synth.plan import (
    assign_shards,
    brainstorm_rows,
    example_rows,
    grounded_rows,
    limits_of,
    query_rows,
)
from embedforge.synth.query_prompts import query_prompts
from embedforge.synth.records import text_lengths, to_training_example
from embedforge.synth.report import plot, summarize
from embedforge.synth.validate import Rejected, leaves_room_for_query, parse_tasks, rescale
from embedforge.synth.worker import JudgeSettings, SynthWorker

log = logging.getLogger(__name__)
STAGE = "synth"
REJECT_SAMPLE_CHARS = 2000


def _stage_config(config: EmbedforgeConfig) -> dict[str, Any]:
    # which nodes the engines run on (custom resources) changes no example
    synth = config.synth.model_dump(mode="json", exclude={"generator": {"resources"}})
    return {"seed": config.seed, "task_name": task_name_of(config), **synth}


def task_name_of(config: EmbedforgeConfig) -> str:
    """The name of the data source that reads this stage's output (kind run, path synth), else `synth`."""
    return next((s.name for s in config.data.sources if s.kind == "run" and s.path == STAGE), STAGE)


def _write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(payload, ensure_ascii=False, indent=1))
    tmp.replace(path)


def _generate(config: EmbedforgeConfig, rows: list[dict[str, Any]], usage_dir: str) -> Iterator[dict[str, Any]]:
    """Stream worker output rows, in input order, from Ray Data over an actor pool of vLLM engines, which record
    where they ran in `usage_dir`."""
    import ray

    gen, judge = config.synth.generator, config.synth.judge
    engine = EngineSettings.from_config(gen)
    judge_settings = JudgeSettings(judge.enabled, judge.model, judge.max_tokens, judge.note_chars)
    ctx = ray.data.DataContext.get_current()
    previous_order = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True  # shards finish in order: deduplication is reproducible
    blocks = max(1, -(-len(rows) // gen.prompts_per_call))
    ds = ray.data.from_items(rows, override_num_blocks=blocks)
    gpus = gen.num_gpus_per_engine * gen.tensor_parallel_size
    ds = ds.map_batches(
        SynthWorker,
        fn_constructor_kwargs={
            "engine": engine,
            "judge": judge_settings,
            "limits": limits_of(config.synth),
            "usage_dir": usage_dir,
        },
        batch_size=gen.prompts_per_call,
        compute=ray.data.ActorPoolStrategy(size=gen.concurrency),
        num_cpus=gen.cpus_per_engine,
        resources=gen.resources,
        **({"num_gpus": gpus} if gpus > 0 else {}),
    )
    try:
        yield from ds.iter_rows()
    finally:
        ctx.execution_options.preserve_order = previous_order


def _brainstorm(config: EmbedforgeConfig, work: Path, usage_dir: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """Step 1, cached in work/tasks.json: task definitions per family plus brainstorm drops by reason."""
    cache = work / "tasks.json"
    if cache.is_file():
        saved = json.loads(cache.read_text())
        return saved["tasks"], saved["drops"]
    synth = config.synth
    tasks: dict[str, list[str]] = {f: [] for f in synth.families}
    drops: Counter[str] = Counter()
    from embedforge.model.loading import query_framing_counter

    instruction_tokens = query_framing_counter(config.model)  # tokens the instruction takes before a query
    started = time.time()
    for row in _generate(config, brainstorm_rows(synth), usage_dir):
        family = str(row["family"])
        try:
            found = parse_tasks(str(row["text"]), synth.max_task_chars)
        except Rejected as err:
            drops[f"brainstorm_{err.reason}"] += 1
            continue
        for task in found:
            if not leaves_room_for_query(instruction_tokens(task), config.model.max_query_length):
                drops["brainstorm_task_too_long"] += 1
            elif task not in tasks[family]:
                tasks[family].append(task)
    for family, found in tasks.items():
        del found[synth.tasks_per_family :]
        if len(found) < synth.tasks_per_family:
            drops["brainstorm_missing_tasks"] += synth.tasks_per_family - len(found)
        log.info("brainstorm %s: %d tasks", family, len(found))
    log.info("brainstorm done in %.1fs", time.time() - started)
    _write_json(cache, {"tasks": tasks, "drops": dict(drops)})
    return tasks, dict(drops)


def _documents(config: EmbedforgeConfig) -> tuple[Path, int, list[CorpusDocument]]:
    """(the collection's path, its size, the documents prompted): a seed-stable sample of `max_documents`."""
    path = resolve_data_path(str(config.synth.documents))
    total, prompted = sample_documents(path, config.synth.max_documents, f"{config.seed}:documents")
    return path, total, prompted


def _example_demonstrations(config: EmbedforgeConfig, collection: Path) -> tuple[dict[str, str], ...]:
    """The user's example queries, each beside the collection's passage BM25 ranks first for it; () without any."""
    synth = config.synth
    if not synth.example_queries:
        return ()
    queries = read_example_queries(resolve_data_path(synth.example_queries))
    demos = example_demonstrations(
        queries, list(iter_documents(collection)), synth.max_example_queries, f"{config.seed}:example_queries"
    )
    for d in demos:
        log.info("synth: example query %r shown beside document %s", d[EXAMPLES_STYLE], d["doc_id"])
    return demos


class _ShardWriter:
    """Finalises one shard: judge threshold, dedup, held-out split, then stats and data written atomically."""

    def __init__(self, config: EmbedforgeConfig, stage: StageRun, work: Path, dedup: Deduplicator) -> None:
        self.config, self.stage, self.work, self.dedup = config, stage, work, dedup
        self.task_name = task_name_of(config)
        self.judge_model = (
            (config.synth.judge.model or config.synth.generator.model) if config.synth.judge.enabled else None
        )

    def finalize(self, shard: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
        synth = self.config.synth
        drops: Counter[str] = Counter()
        rejects, judged, survivors = [], [], []
        for row in rows:
            if row["status"] == "dropped":
                drops[str(row["reason"])] += 1
                rejects.append(
                    {k: str(row[k]) for k in ("row_id", "reason", "detail", "finish_reason")}
                    | {"text": str(row["text"])[:REJECT_SAMPLE_CHARS]}
                )
                continue
            negatives = json.loads(row["negatives"])
            length = sum(text_lengths(str(row["query"]), str(row["positive"]), negatives).values())
            if synth.judge.enabled:
                judged.append([int(row["judge_score"]), length])
                if rescale(int(row["judge_score"])) <= synth.judge.threshold:
                    drops["judge_below_threshold"] += 1
                    continue
            survivors.append(row)
        reasons = self.dedup.filter([str(r["query"]) for r in survivors], [str(r["positive"]) for r in survivors])
        kept = [r for r, why in zip(survivors, reasons, strict=True) if why is None]
        drops.update(why for why in reasons if why is not None)
        examples, heldout = [], []
        for row in kept:
            if row["doc_id"] and is_heldout(str(row["doc_id"]), self.config.seed, synth.heldout_fraction):
                # every query of a held-out document is held out, so no document of the slice is trained on
                doc_id = str(row["doc_id"])
                heldout.append({"query_id": f"q-{row['row_id']}", "text": str(row["query"]), "doc_id": doc_id})
                continue
            examples.append(
                to_training_example(row, self.task_name, self.config.seed, synth.generator.model, self.judge_model)
            )
        tokens = {k: int(sum(int(r[k]) for r in rows)) for k in ("prompt_tokens", "output_tokens", "judge_tokens")}
        stats = {
            "shard": shard,
            "counts": {"prompts": len(rows), "kept": len(examples), "heldout": len(heldout), **tokens},
            "drops": dict(drops),
            "judged": judged,
            "kept_pairs": [[str(r["query"]), str(r["positive"])] for r in kept],
            "heldout": heldout,
        }
        if rejects:
            with (self.work / f"rejected-{shard:05d}.jsonl").open("w", encoding="utf-8") as fh:
                fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rejects)
        _write_json(self.work / "shards" / f"part-{shard:05d}.json", stats)
        self.stage.write_shard(shard, examples, TrainingExample)
        return stats


def stage_settings(config: EmbedforgeConfig) -> tuple[dict[str, Any], str]:
    """Everything that changes the synthetic examples, and its hash (the manifest's `config_hash`)."""
    settings = _stage_config(config)
    return settings, hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def run_synth(config: EmbedforgeConfig, run_dir: str | Path) -> dict[str, Any]:
    """Generate, judge, clean and write synthetic training examples into `run_dir/synth/`; skips when complete."""
    synth = config.synth
    if not synth.enabled:
        raise ValueError("synth.enabled is false: this config does not synthesize data")
    stage_config, config_hash = stage_settings(config)
    stage = StageRun(run_dir, STAGE, stage_config, config_hash)
    if stage.is_complete():
        log.info("synth: complete for this config at %s, skipping", stage.dir)
        return read_manifest(stage.dir) or {}
    work, heldout_dir = stage.dir / "work", stage.dir / "heldout"
    previous = read_manifest(stage.dir)
    if previous is not None and previous.get("config_hash") != stage.config_hash:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(heldout_dir, ignore_errors=True)
    stage.start()
    work.mkdir(parents=True, exist_ok=True)
    from embedforge.cluster.local import connect

    connect()
    started = time.time()
    drops: dict[str, int] = {}
    demonstrations: tuple[dict[str, str], ...] = ()
    if synth.documents:
        collection, collection_size, prompted = _documents(config)
        if synth.writes_queries:
            demonstrations = _example_demonstrations(config, collection)
            prompts = query_prompts().with_examples(demonstrations) if demonstrations else query_prompts()
            rows = query_rows(synth, config.seed, prompted, prompts)
        else:
            rows = grounded_rows(synth, config.seed, prompted)
        log.info(
            "synth: corpus-grounded (%s), %d of %d documents from %s",
            synth.grounded_mode,
            len(prompted),
            collection_size,
            synth.documents,
        )
    else:
        tasks, drops = _brainstorm(config, work, stage.usage_location())
        rows = example_rows(synth, config.seed, tasks)
    stage.time("plan", time.time() - started)
    shards = assign_shards(rows, synth.shard_size)
    stats_dir = work / "shards"
    # a shard counts as done when both its data and its statistics (written first) are on disk
    done = {s for s in stage.done_shards() & set(shards) if (stats_dir / f"part-{s:05d}.json").is_file()}
    prior = [json.loads((stats_dir / f"part-{s:05d}.json").read_text()) for s in sorted(done)]
    embed, dim = encoder_embedder(synth.dedup_model)
    dedup = Deduplicator(embed, synth.near_duplicate_threshold, dim)
    # a generated query that repeats one of the user's example queries is a near-duplicate of it, not a new query
    dedup.filter([d[EXAMPLES_STYLE] for d in demonstrations], [d["document"] for d in demonstrations])
    for st in prior:
        dedup.filter([q for q, _ in st["kept_pairs"]], [p for _, p in st["kept_pairs"]])
    pending = [s for s in sorted(shards) if s not in done]
    log.info(
        "synth: %d prompts in %d shards, %d already done, %d to generate",
        len(rows),
        len(shards),
        len(done),
        len(pending),
    )
    writer = _ShardWriter(config, stage, work, dedup)
    new_stats: list[dict[str, Any]] = []
    gen_started = time.time()
    if pending:
        buffer: dict[int, list[dict[str, Any]]] = {}
        prompts = tokens = 0
        for row in _generate(config, [r for s in pending for r in shards[s]], stage.usage_location()):
            shard = int(row["shard"])
            buffer.setdefault(shard, []).append(row)
            if len(buffer[shard]) < len(shards[shard]):
                continue
            st = writer.finalize(shard, buffer.pop(shard))
            new_stats.append(st)
            prompts += st["counts"]["prompts"]
            tokens += st["counts"]["output_tokens"] + st["counts"]["judge_tokens"]
            elapsed = max(time.time() - gen_started, 1e-9)
            log.info(
                "synth shard %d (%d/%d): kept %d of %d; %.2f prompts/s, %.1f tokens/s",
                shard,
                len(done) + len(new_stats),
                len(shards),
                st["counts"]["kept"],
                st["counts"]["prompts"],
                prompts / elapsed,
                tokens / elapsed,
            )
    gen_seconds = time.time() - gen_started
    stage.time("generate", gen_seconds)
    all_stats = sorted(prior + new_stats, key=lambda st: st["shard"])
    summary = summarize(all_stats)
    for reason, n in drops.items():
        summary["drops"][reason] = summary["drops"].get(reason, 0) + n
    extra: dict[str, Any] = {}
    if synth.documents:
        queries = [Query(h["query_id"], h["text"]) for st in all_stats for h in st["heldout"]]
        relevant = {h["query_id"]: h["doc_id"] for st in all_stats for h in st["heldout"]}
        write_beir(heldout_dir, iter_documents(collection), queries, relevant)
        # scored with the instruction its siblings were trained with (evaluate.registry reads it)
        _write_json(heldout_dir / HELDOUT_TASK_FILE, {"instruction": synth.documents_instruction})
        extra["heldout"] = {"dir": str(heldout_dir), "queries": len(queries), "corpus": collection_size}
    if demonstrations:
        extra["demonstrations"] = [{"query": d[EXAMPLES_STYLE], "doc_id": d["doc_id"]} for d in demonstrations]
    png = plot(all_stats, stage.dir / "report.png", f"synth: {synth.generator.model}")
    new_tokens = sum(st["counts"]["output_tokens"] + st["counts"]["judge_tokens"] for st in new_stats)
    new_prompts = sum(st["counts"]["prompts"] for st in new_stats)
    # wall clock of this call's generation phase, engine start-up included (workers log the pure decode rates)
    throughput = {
        "prompts_per_s": new_prompts / gen_seconds if new_stats else None,
        "tokens_per_s": new_tokens / gen_seconds if new_stats else None,
    }
    manifest = stage.complete(
        counts=summary["counts"],
        drops=summary["drops"],
        judge=summary["judge"],
        throughput=throughput,
        report_png=str(png) if png else None,
        mode="corpus-grounded" if synth.documents else "two-step",
        **extra,
    )
    log.info("synth: kept %d examples, dropped %s", summary["counts"].get("kept", 0), summary["drops"])
    return manifest
