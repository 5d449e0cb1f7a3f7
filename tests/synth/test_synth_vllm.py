"""Real vLLM generation with a tiny random Llama through a local Ray cluster: both modes, resume, skip.

The tiny model writes nonsense, but guided decoding makes it well-formed JSON; what is tested is the plumbing:
every prompt ends as kept, held out or dropped with a reason, examples carry MGH levels and provenance, the
held-out split is a readable BEIR folder, and a run resumes from its shards.
"""

from __future__ import annotations

import json

import pytest

from embedforge.data.beir import read_beir
from embedforge.data.io import read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.models.bundled import prepare
from embedforge.runs.stage import read_manifest

pytestmark = pytest.mark.slow

TOPICS = ["volcanoes", "tax law", "sourdough", "chess openings", "tidal energy", "medieval music"]


@pytest.fixture(scope="module")
def models() -> None:
    prepare(["tiny-llama-vllm", "all-minilm-l6-v2"])


def _accounted(manifest: dict) -> int:
    counts = manifest["counts"]
    return (
        counts["kept"]
        + counts["heldout"]
        + sum(v for k, v in manifest["drops"].items() if not k.startswith("brainstorm_"))
    )


def test_corpus_grounded_run_resumes_and_skips(ray_cluster, models, tiny_config, tmp_path) -> None:
    from embedforge.synth.run import run_synth

    docs = tmp_path / "docs.jsonl"
    texts = {f"d{i}": f"A short note about {topic}, written for test number {i}." for i, topic in enumerate(TOPICS)}
    docs.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    config = tiny_config.model_copy(deep=True)
    config.synth.documents = str(docs)
    config.synth.grounded_mode = "examples"
    config.synth.heldout_fraction = 0.5
    run_dir = tmp_path / "run"

    manifest = run_synth(config, run_dir)
    assert manifest["status"] == "complete" and manifest["mode"] == "corpus-grounded"
    assert manifest["counts"]["prompts"] == len(TOPICS)
    assert _accounted(manifest) == len(TOPICS), manifest
    assert manifest["counts"]["output_tokens"] > 0 and manifest["throughput"]["tokens_per_s"] > 0
    assert manifest["shards"] == [0, 1]
    assert manifest["counts"]["kept"] + manifest["counts"]["heldout"] >= 1, manifest["drops"]

    examples = read_parquet(run_dir / "synth" / "data", TrainingExample)
    assert len(examples) == manifest["counts"]["kept"]
    for ex in examples:
        assert ex.positive in texts.values()
        assert ex.negative_levels == [1, 2, 3, 4] and len(set(ex.negatives)) == 4
        prov = ex.provenance_dict()
        assert prov["template"] == "grounded-v1" and prov["doc_id"] in texts
        assert 1 <= prov["judge"]["score"] <= 10
        assert ex.task_name == "synthetic" and ex.instruction == config.synth.documents_instruction

    heldout = read_beir(run_dir / "synth" / "heldout")
    assert len(heldout.corpus) == len(TOPICS)
    assert len(heldout.queries) == manifest["counts"]["heldout"] == manifest["heldout"]["queries"]
    assert {q.doc_id for q in heldout.qrels} <= set(texts)
    assert not {ex.provenance_dict()["doc_id"] for ex in examples} & {q.doc_id for q in heldout.qrels}

    # a complete stage is skipped as is
    assert run_synth(config, run_dir)["finished_at"] == manifest["finished_at"]

    # an interrupted run (shard 1 missing, manifest still running) regenerates only the missing shard
    (run_dir / "synth" / "data" / "part-00001.parquet").unlink()
    state = read_manifest(run_dir / "synth")
    state["status"] = "running"
    (run_dir / "synth" / "manifest.json").write_text(json.dumps(state))
    before = (run_dir / "synth" / "data" / "part-00000.parquet").stat().st_mtime_ns
    resumed = run_synth(config, run_dir)
    assert resumed["status"] == "complete" and resumed["shards"] == [0, 1]
    assert (run_dir / "synth" / "data" / "part-00000.parquet").stat().st_mtime_ns == before
    assert resumed["counts"]["prompts"] == len(TOPICS) and _accounted(resumed) == len(TOPICS)


def test_query_writing_run_samples_documents_and_holds_out_whole_documents(
    ray_cluster, models, tiny_config, tmp_path
) -> None:
    from embedforge.synth.run import run_synth

    docs = tmp_path / "docs.jsonl"
    texts = {f"d{i}": f"A short note about {topic}, written for test number {i}." for i, topic in enumerate(TOPICS)}
    docs.write_text("".join(json.dumps({"_id": k, "text": v}) + "\n" for k, v in texts.items()))
    config = tiny_config.model_copy(deep=True)
    config.synth.documents = str(docs)
    config.synth.max_documents = len(TOPICS) - 1
    config.synth.heldout_fraction = 0.5
    config.synth.judge.enabled = False
    config.synth.min_chars = 1  # random weights write short, odd queries: keep what the checks allow
    config.synth.max_query_tokens = 8
    config.synth.max_query_chars = 150
    examples = tmp_path / "queries.txt"
    examples.write_text("volcanoes note\nsourdough note\n", encoding="utf-8")
    both = {"query_styles": ["question", "examples"], "example_queries": str(examples)}
    config.synth = type(config.synth).model_validate({**config.synth.model_dump(), **both})
    run_dir = tmp_path / "run"

    manifest = run_synth(config, run_dir)
    # the user's queries are shown beside the passages BM25 ranks first for them (Promptagator 3.1)
    assert manifest["demonstrations"] == [
        {"query": "volcanoes note", "doc_id": "d0"},
        {"query": "sourdough note", "doc_id": "d2"},
    ]
    styles = len(config.synth.query_styles)
    assert manifest["counts"]["prompts"] == (len(TOPICS) - 1) * styles
    assert _accounted(manifest) == manifest["counts"]["prompts"], manifest
    assert manifest["counts"]["kept"] + manifest["counts"]["heldout"] >= 1, manifest["drops"]
    examples = read_parquet(run_dir / "synth" / "data", TrainingExample)
    for ex in examples:
        prov = ex.provenance_dict()
        assert ex.positive == texts[prov["doc_id"]] and ex.negatives == [] and ex.query
        assert prov["template"] == "queries-v1+examples" and prov["placeholders"]["style"] in config.synth.query_styles
    heldout = read_beir(run_dir / "synth" / "heldout")
    assert len(heldout.corpus) == len(TOPICS), "the validation slice searches the whole collection"
    assert not {ex.provenance_dict()["doc_id"] for ex in examples} & {q.doc_id for q in heldout.qrels}
    prompted = {ex.provenance_dict()["doc_id"] for ex in examples} | {q.doc_id for q in heldout.qrels}
    assert len(prompted) <= len(TOPICS) - 1
    # the slice is scored with the instruction its siblings were trained with
    from embedforge.evaluate.registry import HELDOUT_TASK, build_task

    task = build_task(HELDOUT_TASK, config.evaluate, run_dir)
    assert task.instruction == config.synth.documents_instruction


def test_two_step_run_brainstorms_then_generates(ray_cluster, models, tiny_config, tmp_path) -> None:
    from embedforge.synth.run import run_synth

    config = tiny_config.model_copy(deep=True)
    config.synth.families = ["sts", "classification"]
    manifest = run_synth(config, tmp_path)
    tasks = json.loads((tmp_path / "synth" / "work" / "tasks.json").read_text())
    assert set(tasks["tasks"]) == {"sts", "classification"}
    planned = sum(len(v) for v in tasks["tasks"].values()) * config.synth.examples_per_task
    assert manifest["counts"].get("prompts", 0) == planned
    assert _accounted(manifest) == planned
    brainstorm_drops = sum(v for k, v in manifest["drops"].items() if k.startswith("brainstorm_"))
    assert sum(len(v) for v in tasks["tasks"].values()) + brainstorm_drops >= 2
    for ex in read_parquet(tmp_path / "synth" / "data", TrainingExample):
        assert ex.task_type in {"sts", "classification"}
        assert ex.negative_levels == ([1] if ex.task_type == "classification" else [1, 2, 3, 4])
        assert ex.provenance_dict()["family"] == ex.task_type
    assert manifest["report_png"] is None or (tmp_path / "synth" / "report.png").is_file()


def test_cpu_engine_without_native_bf16_runs_float32_with_vllms_onednn_matmul(ray_cluster, models) -> None:
    """On a CPU with no native bf16 (this machine's AVX2), an `auto` engine loads float32 weights, and vLLM gives
    every linear layer its oneDNN float32 matmul (in bf16 it would fall back to torch's slow bf16 `linear`)."""
    import torch

    from embedforge.cluster.device import native_bf16_cpu
    from embedforge.synth.engine import EngineSettings

    @ray_cluster.remote(num_cpus=1)
    def build_and_inspect() -> tuple[set[str], set[str], int]:
        from embedforge.synth.engine import build_engine

        settings = EngineSettings(
            model="bundled:tiny-llama-vllm", max_num_seqs=2, max_model_len=256, kv_cache_gb=0.1, enforce_eager=True
        )
        llm = build_engine(settings)
        model = llm.llm_engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner.model
        kernels = {
            "onednn" if "handler" in module.cpu_linear.__code__.co_freevars else "torch"
            for _, module in model.named_modules()
            if hasattr(module, "cpu_linear")
        }
        dtypes = {str(p.dtype) for p in model.parameters()}
        tokens = len(llm.generate(["volcanoes"], use_tqdm=False)[0].outputs[0].token_ids)
        return kernels, dtypes, tokens

    if torch.cuda.is_available() or native_bf16_cpu():
        pytest.skip("needs a CPU without native bf16 and no GPU: elsewhere vLLM keeps its own kernels and dtype")
    kernels, dtypes, tokens = ray_cluster.get(build_and_inspect.remote(), timeout=600)
    assert kernels == {"onednn"}
    assert dtypes == {"torch.float32"}
    assert tokens > 0


def test_cpu_engine_takes_more_seeded_prompt_tokens_than_one_step_holds(ray_cluster, models) -> None:
    """Seeded prompts whose prefill does not fit one scheduler step (4,096 tokens on CPU) all complete: a split
    prefill made vLLM 0.32 rewind a CPU random generator, which fails ("CPU Generator does not use offset").
    The engine samples with top-p (the settings' default 0.95) through the sort-free filter and applies its
    repetition penalty through embedforge's seen-token path."""
    import torch

    from embedforge.synth.engine import EngineSettings

    @ray_cluster.remote(num_cpus=1)
    def generate_long() -> tuple[int, int, list[int], bool]:
        from vllm.v1.sample import sampler
        from vllm.v1.sample.ops import topk_topp_sampler

        from embedforge.synth.engine import build_engine, generate
        from embedforge.synth.vllm_patch import MARK

        settings = EngineSettings(
            model="bundled:tiny-llama-vllm",
            max_num_seqs=16,
            max_model_len=1024,
            kv_cache_gb=0.2,
            enforce_eager=True,
            repetition_penalty=1.1,
        )
        llm = build_engine(settings)
        # distinct from their first token: a shared prefix would come from vLLM's prefix cache, not be prefilled
        prompts = [f"{i}: " + " ".join(f"{topic} fact {j}." for j in range(70)) for i, topic in enumerate(TOPICS * 2)]
        gens = generate(llm, settings, prompts, [None] * len(prompts), [4] * len(prompts), prompts)
        budget = llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
        ours = all(getattr(f, MARK, False) for f in (topk_topp_sampler.apply_top_k_top_p, sampler.apply_all_penalties))
        return sum(g.prompt_tokens for g in gens), budget, [g.output_tokens for g in gens], ours

    if torch.cuda.is_available():
        pytest.skip("CPU engines only: a GPU engine keeps chunked prefill, and CUDA generators rewind")
    prompt_tokens, budget, outputs, embedforge_sampling = ray_cluster.get(generate_long.remote(), timeout=600)
    assert prompt_tokens > budget  # the prompts cannot all be prefilled in one step
    assert len(outputs) == 2 * len(TOPICS) and all(n > 0 for n in outputs)
    assert embedforge_sampling  # the in-process CPU engine samples through embedforge.synth.top_p and .penalties


def _synth_actor_pids() -> list[int]:
    import psutil

    pids = []
    for proc in psutil.Process().children(recursive=True):  # only this test's own cluster
        try:
            if "SynthWorker" in " ".join(proc.cmdline()):
                pids.append(proc.pid)
        except psutil.Error:
            continue
    return pids


def test_a_synthesis_actor_killed_mid_generation_redoes_its_prompts_once(
    ray_cluster, models, tiny_config, tmp_path
) -> None:
    """SIGKILL the vLLM actor once the first shard is written: Ray Data restarts it and redoes the batch it held;
    per-prompt seeds make the redone prompts sample as before, so the output and every counter equal an
    uninterrupted run's, with no duplicate."""
    import os
    import signal
    import threading
    import time

    from embedforge.synth.run import run_synth

    docs = tmp_path / "docs.jsonl"
    rows = [
        {"_id": f"d{i}", "text": f"A note on {TOPICS[i % len(TOPICS)]}, part {i} of a test corpus."} for i in range(24)
    ]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tiny_config.model_copy(deep=True)
    config.synth.documents = str(docs)
    config.synth.judge.enabled = False
    config.synth.min_chars = 1
    config.synth.max_query_tokens = 8
    config.synth.max_query_chars = 150
    reference = run_synth(config, tmp_path / "reference")

    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(run_synth(config, tmp_path / "run")))
    worker.start()
    first_shard = tmp_path / "run" / "synth" / "data" / "part-00000.parquet"
    killed, deadline = None, time.time() + 600
    while worker.is_alive() and killed is None and time.time() < deadline:
        pids = _synth_actor_pids()
        if first_shard.exists() and pids:
            os.kill(pids[0], signal.SIGKILL)
            killed = pids[0]
        time.sleep(0.05)
    worker.join(timeout=900)
    assert killed is not None, "the synthesis actor finished before it could be killed"
    assert result["status"] == "complete"
    assert result["counts"]["prompts"] == reference["counts"]["prompts"] == 24 * len(config.synth.query_styles)
    for key in ("kept", "heldout", "prompts"):
        assert result["counts"][key] == reference["counts"][key], key
    assert result["drops"] == reference["drops"]
    got = read_parquet(tmp_path / "run" / "synth" / "data", TrainingExample)
    want = read_parquet(tmp_path / "reference" / "synth" / "data", TrainingExample)
    assert len({ex.id for ex in got}) == len(got)  # nothing written twice
    assert sorted((ex.id, ex.query, ex.positive) for ex in got) == sorted((ex.id, ex.query, ex.positive) for ex in want)
