"""Hard-negative mining at growing corpus sizes: embedforge `run_mine` (Ray Data actor pool, faiss) against
sentence-transformers' `mine_hard_negatives` (issue 24).

Both mine the same WikiQA questions (`--queries` train examples) over the same corpus: the examples' own answer
candidates (1x) enlarged to 4x and 16x with other real texts from the shared data (tweets, emotion and banking77
texts, which embedforge takes through `mine.corpus`). Same teacher (all-MiniLM-L6-v2), same selection
(TopK-PercPos 0.95 = relative_margin 0.05, top 7 of 30 candidates, sampling `top`), same forward-pass size
(`--forward-batch`: embedforge's `micro_batch_size` inside each teacher actor call of `--rows-per-call` texts, its
`batch_size`, and sentence-transformers' `batch_size`). embedforge's `mine.search_memory_mb` is set small
(`--search-memory-mb`, 4 MiB: about 2,700 MiniLM vectors), so the larger corpora are searched block by block from
disk, as a corpus past the default 1 GiB budget would be. embedforge's teacher computes in bf16 on a CPU that does
so natively (AMX, AVX512-BF16; `--teacher-dtype`, `mine.teachers[].dtype`), float32 elsewhere;
sentence-transformers runs in its own default, float32 (`--baseline-dtype`), and the negative overlap measures
what the precision changes.

Each system runs in its own child process (fresh embedding cache, so nothing is reused), timed from start to exit
(imports, data loading, model load, Ray start and shutdown included). The parent reads the memory of the child's
whole process tree every 0.2 s (for embedforge: the driver, the private Ray cluster it starts and its actors) and
records the peak of its summed PSS: each process's private memory plus its share of pages several processes map
(shared libraries, Ray's object store), which summed RSS would count once per process; apart, the peak of the
job's processes alone (the tree less Ray's cluster daemons: GCS, raylet, dashboard and agents, which a cluster runs
before and after any job), and which processes held the memory at the peak. Sampling misses spikes shorter than
its period, so the child process's own peak as the kernel counts it is recorded too: its resident memory's
high-water mark (`VmHWM`) less the pages it shares with other processes (RSS - PSS at its largest sampled RSS).
sentence-transformers runs in that one process, so for it this is its exact peak; embedforge's child is only its
driver. Ratios, at the largest corpus: peak memory (goal <= 1.5x), peak memory growth from 1x to the largest corpus
(goal <= 2x), throughput in corpus + query texts per second (goal >= 1.0x) and the overlap of the negatives chosen
for each (query, positive) (goal >= 95 %).
Writes benchmarks/results/mine.json and mine.png.

    .venv/bin/python benchmarks/mine.py [--queries 250] [--scales 1,4,16] [--actors 1] [--actor-cpus 2]
        [--rows-per-call 64] [--teacher-dtype float32|bfloat16] [--baseline-dtype float32|bfloat16]
        [--experiment NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parents[1]
NEGATIVES, CANDIDATES, MARGIN = 7, 30, 0.95
TEACHER = "bundled:all-minilm-l6-v2"
# how often the process tree's memory is read: one read of a Ray cluster's ~23 processes takes ~16 ms of CPU here
SAMPLE_SECONDS = 0.2
EXTRA_SOURCES = ("tweet_sentiment_extraction", "emotion", "banking77")  # short real texts, like WikiQA's answers


def _source(queries: int):
    from embedforge.config.data import DataSource

    return DataSource(name="wikiqa", kind="shared", path="wikiqa", split="train", max_examples=queries)


def _base_corpus(queries: int) -> tuple[list, list[str]]:
    """The WikiQA examples and the corpus embedforge builds from them (positives + given negatives)."""
    from embedforge.data.sources import load_source
    from embedforge.mine.pools import build_pools

    examples = load_source(_source(queries)).examples
    [pool] = build_pools(examples)
    return examples, pool.corpus


def write_extra_documents(corpus: list[str], scale: int, path: Path) -> int:
    """Real texts (`EXTRA_SOURCES`, in order) enlarging `corpus` to `scale` times its size, as a JSONL document
    collection; returns the enlarged corpus size."""
    from embedforge.data.shared import read_shared

    have = set(corpus)
    wanted = (scale - 1) * len(corpus)
    extra: list[str] = []
    for name in EXTRA_SOURCES:
        for row in read_shared(name):
            text = row.text.strip()
            if text and text not in have and len(extra) < wanted:
                have.add(text)
                extra.append(text)
    if len(extra) < wanted:
        raise SystemExit(f"error: only {len(extra)} distinct extra texts for scale {scale} (needs {wanted})")
    with path.open("w") as f:
        for i, text in enumerate(extra):
            f.write(json.dumps({"doc_id": f"extra-{i}", "text": text}) + "\n")
    return len(corpus) + wanted


def _config(args: argparse.Namespace, cache: Path):
    from embedforge.config import config_from_dict
    from embedforge.config.loader import read_config_data

    data = read_config_data(REPO / "configs" / "local.yaml")
    data["data"]["sources"] = [_source(args.queries).model_dump(mode="json", exclude_defaults=True)]
    teacher = {
        "kind": "sentence_transformers",
        "model": TEACHER,
        "batch_size": args.rows_per_call,
        "micro_batch_size": args.forward_batch,
        "dtype": args.teacher_dtype,
        "concurrency": args.actors,
        "num_cpus": args.actor_cpus,
    }
    selection = {
        "margin_type": "perc_pos",
        "margin": MARGIN,
        "num_negatives": NEGATIVES,
        "candidate_k": CANDIDATES,
        "sampling": "top",
    }
    data["mine"] = {
        "teachers": [teacher],
        "selection": selection,
        "sources": ["wikiqa"],
        "cache_dir": str(cache),
        "search_memory_mb": args.search_memory_mb,
    }
    if args.extra:
        data["mine"]["corpus"] = str(args.extra)
    data["synth"] = {"enabled": False}
    data["train"]["stages"] = [{**data["train"]["stages"][0], "datasets": [{"source": "wikiqa"}]}]
    return config_from_dict(data, "benchmarks/mine.py")


def _extra_texts(args: argparse.Namespace) -> list[str]:
    """The extra documents as embedforge embeds them (`mine.corpus`)."""
    from embedforge.data.documents import read_documents

    return [d.embedded_text for d in read_documents(args.extra)] if args.extra else []


def worker_embedforge(args: argparse.Namespace, out: Path) -> None:
    from embedforge.data.io import read_parquet
    from embedforge.data.schema import TrainingExample
    from embedforge.logs import configure_logging
    from embedforge.mine.run import run_mine

    configure_logging()
    manifest = run_mine(_config(args, out.parent / "cache"), out.parent / "run")
    rows = read_parquet(out.parent / "run" / "mine" / "data", TrainingExample)
    out.write_text(
        json.dumps(
            {
                "inputs": manifest["counts"]["input_examples"],
                "rows": {f"{r.query}\x1f{r.positive}": r.negatives for r in rows},
            }
        )
    )


def worker_st(args: argparse.Namespace, out: Path) -> None:
    import torch
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import mine_hard_negatives

    from embedforge.models.bundled import resolve_model

    torch.set_num_threads(2)
    examples, corpus = _base_corpus(args.queries)
    corpus = corpus + _extra_texts(args)  # the same corpus embedforge mines
    model = SentenceTransformer(str(resolve_model(TEACHER)), device="cpu")
    model.to(getattr(torch, args.baseline_dtype))
    dataset = Dataset.from_dict({"query": [e.query for e in examples], "positive": [e.positive for e in examples]})
    mined = mine_hard_negatives(
        dataset,
        model,
        corpus=corpus,
        range_max=CANDIDATES,
        relative_margin=round(1 - MARGIN, 6),
        num_negatives=NEGATIVES,
        sampling_strategy="top",
        output_format="n-tuple",
        batch_size=args.forward_batch,
        verbose=False,
    )
    rows = {}
    for row in mined:
        negatives = [row[f"negative_{i}"] for i in range(1, NEGATIVES + 1) if row.get(f"negative_{i}")]
        rows[f"{row['query']}\x1f{row['positive']}"] = negatives
    out.write_text(json.dumps({"inputs": len(examples), "rows": rows}))


# Ray's own daemons, which a cluster runs before any job and keeps after it (a private cluster here starts them in
# the child): matched in the command line. Every other process of the tree is the job's: the driver, its actors and
# tasks (Ray Data's helper actors included) and idle workers.
CLUSTER_DAEMONS = (
    "gcs_server",
    "raylet",
    "dashboard",
    "DashboardAgent",
    "RuntimeEnvAgent",
    "monitor.py",
    "log_monitor.py",
    "forkserver",
    "resource_tracker",
)


def tree_memory(pid: int) -> list[tuple[str, int, int]]:
    """(command line, PSS, RSS) in bytes of a process and each of its descendants."""
    import psutil

    try:
        parent = psutil.Process(pid)
        procs = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return []
    rows = []
    for p in procs:
        try:
            info = p.memory_full_info()
            rows.append((" ".join(p.cmdline()), info.pss, info.rss))
        except psutil.Error:
            continue
    return rows


def peak_rss(pid: int) -> int:
    """The kernel's high-water mark of a process's resident memory (`VmHWM`, bytes; 0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    line = next((row for row in status.splitlines() if row.startswith("VmHWM:")), None)
    return int(line.split()[1]) * 1024 if line else 0


def is_cluster_daemon(command: str) -> bool:
    return any(name in command for name in CLUSTER_DAEMONS)


def run_child(system: str, args: argparse.Namespace, workdir: Path, extra: Path | None) -> dict:
    out = workdir / system / "result.json"
    out.parent.mkdir(parents=True)
    cmd = [sys.executable, __file__, "--worker", system, "--out", str(out), "--queries", str(args.queries)]
    cmd += ["--actors", str(args.actors), "--actor-cpus", str(args.actor_cpus)]
    cmd += ["--forward-batch", str(args.forward_batch), "--rows-per-call", str(args.rows_per_call)]
    cmd += ["--search-memory-mb", str(args.search_memory_mb)]
    cmd += ["--teacher-dtype", args.teacher_dtype, "--baseline-dtype", args.baseline_dtype]
    cmd += ["--extra", str(extra)] if extra else []
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a private cluster, inside the tree
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env)
    peak, job_peak, at_peak, stop = 0, 0, [], threading.Event()
    root_hwm, root_shared, root_rss = 0, 0, 0

    def sample() -> None:
        nonlocal peak, job_peak, at_peak, root_hwm, root_shared, root_rss
        while not stop.is_set():
            rows = tree_memory(proc.pid)
            sizes = [(command, pss) for command, pss, _ in rows]
            total = sum(size for _, size in sizes)
            job_peak = max(job_peak, sum(size for command, size in sizes if not is_cluster_daemon(command)))
            if total > peak:
                peak, at_peak = total, sizes
            root_hwm = max(root_hwm, peak_rss(proc.pid))
            if rows and rows[0][2] >= root_rss:  # the child itself: its pages shared with others at its largest RSS
                root_rss, root_shared = rows[0][2], rows[0][2] - rows[0][1]
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    if proc.wait() != 0:
        raise SystemExit(f"error: {system} worker failed with exit code {proc.returncode}")
    seconds = time.perf_counter() - started
    stop.set()
    sampler.join()
    result = json.loads(out.read_text())
    mib = lambda size: round(size / 2**20, 1)  # noqa: E731
    return {
        **result,
        "seconds": seconds,
        "peak_pss_mib": mib(peak),
        "peak_job_pss_mib": mib(job_peak),
        "child_kernel_peak_mib": mib(max(root_hwm - root_shared, 0)),
        "processes_at_peak": [
            {"command": command[:120], "pss_mib": mib(size), "cluster_daemon": is_cluster_daemon(command)}
            for command, size in sorted(at_peak, key=lambda item: -item[1])
        ],
    }


def overlap(ours: dict[str, list[str]], theirs: dict[str, list[str]]) -> tuple[float, int]:
    """Mean share of sentence-transformers' negatives that embedforge also chose, over rows both kept."""
    common = [k for k in theirs if k in ours and theirs[k]]
    if not common:
        return 0.0, 0
    shares = [len(set(ours[k]) & set(theirs[k])) / len(theirs[k]) for k in common]
    return sum(shares) / len(shares), len(common)


def plot(scales: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [s["corpus"] for s in scales]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for system, color in (("embedforge", "tab:blue"), ("sentence_transformers", "tab:gray")):
        axes[0].plot(sizes, [s[system]["texts_per_s"] for s in scales], "o-", color=color, label=system)
        axes[1].plot(sizes, [s[system]["peak_pss_mib"] for s in scales], "o-", color=color, label=system)
    axes[0].set_ylabel("texts / s (corpus + queries)")
    axes[1].set_ylabel("peak memory, MiB (process tree)")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes], minor=False)
        ax.minorticks_off()
        ax.set_xlabel("corpus texts")
        ax.set_ylim(bottom=0)
        ax.legend()
    fig.suptitle("Hard-negative mining, WikiQA queries, MiniLM teacher, TopK-PercPos 0.95, 7 negatives")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def measure_scale(args: argparse.Namespace, base: list[str], scale: int, tmp: Path) -> dict:
    extra = tmp / f"extra-{scale}x.jsonl" if scale > 1 else None
    corpus = write_extra_documents(base, scale, extra) if extra else len(base)
    runs = {
        "sentence_transformers": run_child("st", args, tmp / f"{scale}x", extra),
        "embedforge": run_child("embedforge", args, tmp / f"{scale}x", extra),
    }
    share, compared = overlap(runs["embedforge"].pop("rows"), runs["sentence_transformers"].pop("rows"))
    for result in runs.values():
        result["texts_per_s"] = (corpus + result["inputs"]) / result["seconds"]
    print(
        f"{scale}x ({corpus} texts): embedforge {runs['embedforge']['seconds']:.1f} s, "
        f"{runs['embedforge']['peak_pss_mib']:.0f} MiB (job {runs['embedforge']['peak_job_pss_mib']:.0f}); "
        f"sentence-transformers "
        f"{runs['sentence_transformers']['seconds']:.1f} s, {runs['sentence_transformers']['peak_pss_mib']:.0f} MiB; "
        f"overlap {share:.3f}",
        flush=True,
    )
    return {"scale": scale, "corpus": corpus, **runs, "negative_overlap": share, "overlap_rows_compared": compared}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=250, help="WikiQA train examples to mine")
    parser.add_argument("--scales", default="1,4,16", help="corpus sizes, as multiples of the examples' own")
    parser.add_argument("--actors", type=int, default=1, help="embedforge embedding actors")
    parser.add_argument("--actor-cpus", type=int, default=2, help="CPUs (torch threads) of each actor")
    parser.add_argument("--forward-batch", type=int, default=16, help="texts per forward pass, both systems")
    parser.add_argument(
        "--rows-per-call", type=int, default=64, help="embedforge: texts per teacher actor call (batch_size)"
    )
    parser.add_argument("--search-memory-mb", type=int, default=4, help="embedforge's mine.search_memory_mb")
    parser.add_argument(
        "--teacher-dtype",
        choices=["float32", "bfloat16"],
        help="embedforge's teacher dtype (mine.teachers[].dtype); default: bfloat16 on a CPU that computes it "
        "natively (AMX, AVX512-BF16), float32 elsewhere",
    )
    parser.add_argument(
        "--baseline-dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="sentence-transformers' dtype (its own default: float32)",
    )
    parser.add_argument("--experiment", help="record the run as this named experiment beside the main result")
    parser.add_argument("--worker", choices=["embedforge", "st"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--extra", type=Path, help="(worker) extra documents, JSONL")
    args = parser.parse_args()
    if args.teacher_dtype is None:
        from embedforge.cluster.device import native_bf16_cpu

        args.teacher_dtype = "bfloat16" if native_bf16_cpu() else "float32"
    if args.worker:
        (worker_embedforge if args.worker == "embedforge" else worker_st)(args, args.out)
        return
    from common import RESULTS, machine_info, record_experiment, write_result

    machine = machine_info()
    scales = sorted({int(s) for s in args.scales.split(",")})
    if scales[0] != 1:
        raise SystemExit("error: --scales must start at 1 (growth is measured against the 1x corpus)")
    with tempfile.TemporaryDirectory(prefix="bench-mine-") as tmp:
        base = _base_corpus(args.queries)[1]
        measured = [measure_scale(args, base, scale, Path(tmp)) for scale in scales]
    first, last = measured[0], measured[-1]
    ours, theirs = last["embedforge"], last["sentence_transformers"]
    payload = {
        "machine": machine,
        "settings": {
            "dataset": "wikiqa train questions; corpus enlarged with tweet_sentiment_extraction texts",
            "queries": args.queries,
            "scales": scales,
            "teacher": "all-MiniLM-L6-v2",
            "margin": f"TopK-PercPos {MARGIN}",
            "num_negatives": NEGATIVES,
            "candidates": CANDIDATES,
            "embedforge_actors": args.actors,
            "embedforge_actor_cpus": args.actor_cpus,
            "sentence_transformers_threads": 2,
            "forward_batch": args.forward_batch,
            "rows_per_call": args.rows_per_call,
            "search_memory_mb": args.search_memory_mb,
            "embedforge_teacher_dtype": args.teacher_dtype,
            "sentence_transformers_dtype": args.baseline_dtype,
            "memory": "peak summed PSS of the process tree (Ray cluster included), sampled every 0.2 s; job: less "
            "Ray's daemons; child kernel peak: the child process's VmHWM less its shared pages",
        },
        "scales": measured,
        "ratios": {
            "peak_memory_embedforge_over_st": ours["peak_pss_mib"] / theirs["peak_pss_mib"],
            "peak_job_memory_embedforge_over_st": ours["peak_job_pss_mib"] / theirs["peak_pss_mib"],
            "peak_memory_embedforge_over_st_kernel_peak": ours["peak_pss_mib"] / theirs["child_kernel_peak_mib"],
            f"peak_memory_growth_{last['scale']}x": ours["peak_pss_mib"] / first["embedforge"]["peak_pss_mib"],
            f"peak_memory_growth_{last['scale']}x_st": theirs["peak_pss_mib"]
            / first["sentence_transformers"]["peak_pss_mib"],
            "throughput_embedforge_over_st": ours["texts_per_s"] / theirs["texts_per_s"],
            "negative_overlap": last["negative_overlap"],
        },
        "goals": {
            "peak_memory_embedforge_over_st": "<= 1.5",
            f"peak_memory_growth_{last['scale']}x": "<= 2.0",
            "throughput_embedforge_over_st": ">= 1.0",
            "negative_overlap": ">= 0.95",
        },
    }
    if args.experiment:  # a variant of the settings: kept beside the benchmark's own result, which stays
        entry = {"date": machine["date"], "settings": payload["settings"], "ratios": payload["ratios"]}
        path = record_experiment("mine", args.experiment, entry, payload["goals"])
    else:
        path = write_result("mine", payload)
        plot(measured, RESULTS / "mine.png")
    print(json.dumps(payload["ratios"], indent=2), f"\nwritten {path}")


if __name__ == "__main__":
    main()
