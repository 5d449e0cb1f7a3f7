"""The whole mining stage on real shared data (WikiQA retrieval + STS-B conversion) through a local Ray cluster:
output, manifest, skip-if-complete, resume, a killed actor, and memory as the corpus grows 10x."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from embedforge.config import load_config
from embedforge.data.schema import TrainingExample
from embedforge.mine.run import run_mine
from embedforge.runs.stage import read_manifest

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
INSTRUCTIONS = {
    "wikiqa": "Given a question, retrieve Wikipedia passages that answer the question",
    "stsb": "Retrieve semantically similar text.",
}


def _overrides(cache: Path, max_examples: int) -> list[str]:
    sources = [
        {
            "name": "wikiqa",
            "kind": "shared",
            "path": "wikiqa",
            "split": "train",
            "task_type": "retrieval",
            "max_examples": max_examples,
            "instruction": INSTRUCTIONS["wikiqa"],
        },
        {
            "name": "stsb",
            "kind": "shared",
            "path": "stsb",
            "split": "train",
            "task_type": "sts",
            "max_examples": max_examples,
            "instruction": INSTRUCTIONS["stsb"],
        },
    ]
    # two 1-CPU actors fill the 2-CPU test cluster: nothing else of the stage may need a CPU of its own
    teacher = {
        "kind": "sentence_transformers",
        "model": "bundled:all-minilm-l6-v2",
        "batch_size": 8,
        "max_length": 64,
        "concurrency": 2,
        "num_cpus": 1,
    }
    return [
        f"data.sources={json.dumps(sources)}",
        f"mine.teachers={json.dumps([teacher])}",
        "mine.selection={margin_type: perc_pos, margin: 0.95, num_negatives: 3, candidate_k: 12}",
        "mine.sources=[wikiqa, stsb]",
        "mine.shard_size=16",
        f"mine.cache_dir={cache}",
    ]


def _config(cache: Path, max_examples: int = 24):
    return load_config(CONFIGS / "tiny.yaml", _overrides(cache, max_examples))


def _read(run_dir: Path) -> list[TrainingExample]:
    from embedforge.data.io import read_parquet

    return read_parquet(run_dir / "mine" / "data", TrainingExample)


class PeakMemory:
    """Peak summed RSS of this process and all its descendants (the private Ray cluster's processes)."""

    def __init__(self) -> None:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def reference(ray_cluster, tmp_path_factory, minilm_dir, shared_data):
    root = tmp_path_factory.mktemp("mine-ref")
    with PeakMemory() as memory:
        manifest = run_mine(_config(root / "cache"), root / "run")
    return {"root": root, "run_dir": root / "run", "manifest": manifest, "peak": memory.peak}


def test_stage_writes_positive_aware_examples_with_soft_labels(reference):
    examples = _read(reference["run_dir"])
    manifest = reference["manifest"]
    assert manifest["status"] == "complete"
    assert manifest["counts"]["examples"] == len(examples) > 30
    assert {ex.task_name for ex in examples} == {"wikiqa", "stsb"}
    assert {ex.task_type for ex in examples} == {"retrieval", "sts"}
    lowest_positive: dict[tuple[str, str], float] = {}
    for ex in examples:
        key = (ex.instruction, ex.query)
        lowest_positive[key] = min(lowest_positive.get(key, 1e9), ex.positive_score)
    positives_of = {}
    for ex in examples:
        positives_of.setdefault((ex.instruction, ex.query), set()).add(ex.positive)
    for ex in examples:
        key = (ex.instruction, ex.query)
        assert 1 <= len(ex.negatives) <= 3 and len(ex.negative_scores) == len(ex.negatives)
        assert not set(ex.negatives) & positives_of[key] and ex.query not in ex.negatives
        assert len(set(ex.negatives)) == len(ex.negatives)
        assert ex.negative_scores == sorted(ex.negative_scores, reverse=True)
        assert max(ex.negative_scores) <= 0.95 * lowest_positive[key] + 1e-5  # TopK-PercPos
        assert ex.instruction == INSTRUCTIONS[ex.task_name]
        assert ex.provenance_dict()["mining"]["margin"] == 0.95
    stats = manifest["statistics"]["all"]
    assert stats["examples"] == len(examples) and stats["negative_scores"]["count"] == sum(
        len(ex.negatives) for ex in examples
    )
    assert stats["removed_by_filter"]["positive"] > 0 and stats["removed_by_filter"]["margin"] > 0
    assert manifest["parameters"]["teachers"][0]["model"] == "bundled:all-minilm-l6-v2"
    assert manifest["parameters"]["rrf_k"] == 60 and manifest["parameters"]["selection"]["candidate_k"] == 12
    assert len(manifest["shards"]) >= 3 and not (reference["run_dir"] / "mine" / "work").exists()


def test_cli_skips_a_complete_stage_and_resumes_a_lost_shard(reference, capsys):
    from embedforge.cli.main import main

    run_dir, root = reference["run_dir"], reference["root"]
    before = _read(run_dir)
    args = ["mine", str(CONFIGS / "tiny.yaml"), "--run-dir", str(run_dir)]
    args += [a for o in _overrides(root / "cache", 24) for a in ("--set", o)]
    assert main(args) == 0
    assert read_manifest(run_dir / "mine")["finished_at"] == reference["manifest"]["finished_at"]  # skipped
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["counts"]["examples"] == len(before)
    # an interrupted run: the last shard never landed and the manifest still says running
    last = max(reference["manifest"]["shards"])
    (run_dir / "mine" / "data" / f"part-{last:05d}.parquet").unlink()
    manifest_path = run_dir / "mine" / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "status": "running"}))
    kept_mtimes = {p.name: p.stat().st_mtime_ns for p in (run_dir / "mine" / "data").glob("*.parquet")}
    assert main(args) == 0
    assert read_manifest(run_dir / "mine")["status"] == "complete"
    assert {
        p.name: p.stat().st_mtime_ns for p in (run_dir / "mine" / "data").glob("*.parquet") if p.name in kept_mtimes
    } == kept_mtimes  # done shards were not rewritten
    assert _read(run_dir) == before


def _embed_actor_pids() -> list[int]:
    pids = []
    for p in psutil.Process().children(recursive=True):  # only processes of this test's own cluster
        try:
            if "EmbedActor" in " ".join(p.cmdline()):
                pids.append(p.pid)
        except psutil.Error:
            continue
    return pids


def test_a_killed_actor_mid_run_gives_identical_output(reference, tmp_path):
    cache = tmp_path / "cache"
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(run_mine(_config(cache), tmp_path / "run")))
    worker.start()
    killed = None
    deadline = time.time() + 300
    while worker.is_alive() and time.time() < deadline and killed is None:
        shards = list(cache.glob("*/*.keys.npy"))
        pids = _embed_actor_pids()
        if shards and pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.05)
    worker.join(timeout=600)
    assert killed is not None, "the embedding actor finished before it could be killed"
    assert not psutil.pid_exists(killed) or psutil.Process(killed).status() == psutil.STATUS_ZOMBIE
    assert result["status"] == "complete"
    assert _read(tmp_path / "run") == _read(reference["run_dir"])


def test_peak_memory_stays_flat_when_the_corpus_grows_10x(reference, tmp_path):
    small = reference["manifest"]["counts"]["input_examples"]
    with PeakMemory() as memory:
        manifest = run_mine(_config(tmp_path / "cache", max_examples=240), tmp_path / "run")
    assert manifest["counts"]["input_examples"] >= 8 * small
    ratio = memory.peak / reference["peak"]
    print(f"peak RSS {reference['peak'] / 2**20:.0f} MiB -> {memory.peak / 2**20:.0f} MiB at 10x ({ratio:.2f}x)")
    assert ratio <= 1.5
    shutil.rmtree(tmp_path / "cache")


def test_hybrid_teachers_fuse_dense_bm25_and_an_llm_through_ray(ray_cluster, tmp_path, tiny_model_dir, shared_data):
    teachers = [
        {"kind": "embedforge", "model": "bundled:tiny-llama", "batch_size": 16, "micro_batch_size": 4},
        {"kind": "bm25"},
        {"kind": "llm_pointwise", "model": "bundled:tiny-llama", "batch_size": 16, "max_length": 128},
        {"kind": "llm_query_likelihood", "model": "bundled:tiny-llama", "batch_size": 16, "max_length": 128},
    ]
    overrides = [
        *_overrides(tmp_path / "cache", 8),
        f"mine.teachers={json.dumps(teachers)}",
        "mine.sources=[wikiqa]",
        "mine.selection={margin_type: none, num_negatives: 2, candidate_k: 6}",
    ]
    manifest = run_mine(load_config(CONFIGS / "tiny.yaml", overrides), tmp_path / "run")
    examples = _read(tmp_path / "run")
    assert manifest["counts"]["examples"] == len(examples) == 8
    for ex in examples:
        # four RRF terms per document: every fused score lies in (0, 4 / (60 + 1)]
        assert all(0 < s <= 4 / 61 + 1e-9 for s in [ex.positive_score, *ex.negative_scores])
        assert len(ex.negatives) == 2 and ex.positive not in ex.negatives
    assert [t["kind"] for t in manifest["parameters"]["teachers"]] == [
        "embedforge",
        "bm25",
        "llm_pointwise",
        "llm_query_likelihood",
    ]


def test_round_trip_consistency_drops_and_counts_queries_that_miss_their_document(reference, tmp_path):
    """Promptagator 3.2 at its strictest (the positive must rank first): some WikiQA questions fail, each is
    counted once in the manifest and the statistics, and every kept query's positive outscores its candidates."""
    overrides = [
        *_overrides(reference["root"] / "cache", 24),
        "mine.selection={margin_type: perc_pos, margin: 0.95, num_negatives: 3, candidate_k: 12, max_positive_rank: 1}",
    ]
    manifest = run_mine(load_config(CONFIGS / "tiny.yaml", overrides), tmp_path / "run")
    examples = _read(tmp_path / "run")
    stats = manifest["statistics"]["all"]
    failed = manifest["drops"]["examples failing round-trip consistency"]
    assert failed == stats["dropped_round_trip"] > 0
    assert stats["examples"] + failed + stats["dropped_too_few_negatives"] == stats["input_examples"]
    assert len(examples) == stats["examples"] < reference["manifest"]["counts"]["examples"]
    for ex in examples:
        assert ex.positive_score > max(ex.negative_scores)


def test_teacher_actors_encode_on_their_main_thread(ray_cluster):
    import numpy as np
    import ray

    from embedforge.mine.embed_stage import teacher_pool

    class WhichThread:  # defined here so that Ray ships it by value to the actor
        def __call__(self, batch: dict) -> dict:
            return {"main": np.full(len(batch["id"]), threading.current_thread() is threading.main_thread())}

    def ran_on_main(compute) -> set[bool]:
        ds = ray.data.range(8).map_batches(WhichThread, batch_size=4, compute=compute, num_cpus=1)
        return {bool(row["main"]) for row in ds.take_all()}

    assert ran_on_main(teacher_pool(1)) == {True}
    # Ray Data's default hands batches to a second thread, where torch's CPU kernels run slower
    assert ran_on_main(ray.data.ActorPoolStrategy(size=1)) == {False}
