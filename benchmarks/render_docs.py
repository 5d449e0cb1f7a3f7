"""Write docs/benchmarks.md from benchmarks/results/*.json, so the page can never drift from the results.

One row per ratio of every result: its value, its goal, whether it is met, the machine and the date; the plots
beside the results are linked under the table, and what ran on a GPU follows it. The same script writes the index
of recorded experiments at the end of docs/experiments.md. `make bench` runs it after the benchmarks; a test keeps
the committed pages equal to what this script writes.

    .venv/bin/python benchmarks/render_docs.py
"""

from __future__ import annotations

import json
import operator
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
EXPERIMENTS = ROOT / "docs" / "experiments.md"
INDEX_MARK = "<!-- the index below is written by benchmarks/render_docs.py from benchmarks/results/*.json -->"
COMPARISONS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, ">": operator.gt, "<": operator.lt}
TARGET = re.compile(r"^\s*(>=|<=|==|>|<)\s*([-+]?[0-9.]+(?:e[-+]?[0-9]+)?)")


def goal_status(value: float, goal: Any) -> tuple[str, str]:
    """(the goal as written, `yes` / `no` / `-` when it is a number to report rather than a target)."""
    if isinstance(goal, dict):
        target = str(goal.get("target", ""))
        if "met" in goal:
            return target, "yes" if goal["met"] else "no"
        goal = target
    text = str(goal)
    match = TARGET.match(text)
    if match is None:
        return text, "-"
    return text, "yes" if COMPARISONS[match.group(1)](value, float(match.group(2))) else "no"


def machine_label(machine: dict[str, Any]) -> str:
    if machine.get("gpu"):
        return str(machine["gpu"]).split(" (")[0]
    cpu = machine.get("cpu_model", "unknown CPU")
    return f"{cpu}, {machine['cores']} cores" if machine.get("cores") else str(cpu)


def _number(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def render(results: Path = RESULTS) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Every number below is read from `benchmarks/results/*.json` by `benchmarks/render_docs.py`; re-run a",
        "benchmark with `.venv/bin/python benchmarks/<name>.py` (or all of them with `make bench`) and this page",
        "with the script. A ratio compares embedforge with a baseline measured in the same run on the same machine",
        "(its name says which); a goal of `reported` or a sentence is a number to read, not a target.",
        "",
        "| result | ratio | value | goal | met | machine | date |",
        "|---|---|---|---|---|---|---|",
    ]
    plots = []
    for path in sorted(results.glob("*.json")):
        payload = json.loads(path.read_text())
        machine = machine_label(payload.get("machine") or {})
        date = str(payload.get("date", "")).split("T")[0]
        goals = payload.get("goals", {})
        for name, value in payload.get("ratios", {}).items():
            goal, met = goal_status(value, goals.get(name, "reported"))
            lines.append(f"| {path.stem} | {name} | {_number(value)} | {goal} | {met} | {machine} | {date} |")
        plots += [
            f"- [{png.name}](../benchmarks/results/{png.name})" for png in sorted(results.glob(f"{path.stem}*.png"))
        ]
    lines += ["", "Plots:", "", *sorted(set(plots)), ""]
    gpu = results / "gpu.json"
    if gpu.is_file():
        lines += gpu_section(json.loads(gpu.read_text()))
    return "\n".join(lines)


def gpu_section(doc: dict[str, Any]) -> list[str]:
    """What `benchmarks/gpu.py` ran where: the machine, each phase's outcome, and the rows behind the ratios."""
    m = doc["machine"]
    lines = [
        "## What ran on the GPU (benchmarks/gpu.py)",
        "",
        f"{m.get('gpu')} ({m.get('gpu_memory_gib')} GiB, driver {m.get('driver')}, CUDA {m.get('cuda')}), "
        f"{m.get('host_cpus')} host CPUs; Python {m.get('python')}, torch {m.get('torch')}, transformers "
        f"{m.get('transformers')}, peft {m.get('peft')}, sentence-transformers {m.get('sentence_transformers')}, "
        f"Ray {m.get('ray')}. Random weights in the real architectures' shapes (`benchmarks/gpu_bench/shapes`). MFU "
        "is useful FLOPs (`embedforge.model.flops`) per second over the bf16 matrix-product rate measured in the same "
        f"run ({doc.get('peaks_flops_per_s', {}).get('measured', 0) / 1e12:.0f} TFLOP/s); `mfu_datasheet` in the "
        "JSON is over the chip's dense bf16 peak.",
        "",
        "| phase | outcome | seconds |",
        "|---|---|---|",
    ]
    runs = doc.get("runs") or [{"date": m.get("date"), "phases": sorted(doc["phases"])}]
    for name, phase in doc["phases"].items():
        outcome = phase["status"] + (" (measurements made before it stopped are kept)" if phase.get("partial") else "")
        lines.append(f"| {name} | {outcome} | {phase.get('seconds', '')} |")
    lines += ["", "Runs: " + "; ".join(f"{r['date']} ({', '.join(r['phases'])})" for r in runs) + ".", ""]
    train = (doc["phases"].get("train") or {}).get("result") or {}
    st = (doc["phases"].get("train_st") or {}).get("result") or {}
    rows = [("embedforge", train.get(w), w) for w in ("uniform", "mixed")]
    rows += [("sentence-transformers", st.get(w), w) for w in ("uniform", "mixed")]
    rows = [r for r in rows if r[1]]
    if rows:
        lines += [
            "Training steps of the production per-GPU batch (4 queries, each with a positive and 7 hard negatives;",
            "uniform: 512-token texts; mixed: queries of 8-64 tokens, documents of 32-512):",
            "",
            "| system | texts | step s | tokens/s | MFU | peak GiB |",
            "|---|---|---|---|---|---|",
            *[
                f"| {name} | {w} | {r['step_s']} | {r['tokens_per_s']:.0f} | {r['mfu_measured']:.3f} | "
                f"{r['peak_gib']} |"
                for name, r, w in rows
            ],
            "",
        ]
    production = ((doc["phases"].get("production_batch") or {}).get("result") or {}).get("uniform")
    if production:
        lines += [
            f"The whole production batch on one GPU ({production['tokens_per_step']} tokens: 128 queries, each with "
            f"8 documents, all of 512 tokens; GradCache): one step in {production['step_s']} s, "
            f"{production['tokens_per_s']:.0f} tokens/s, MFU {production['mfu_measured']:.3f}, "
            f"peak {production['peak_gib']} GiB.",
            "",
        ]
    encode_rows = []
    for phase in ("encode_decoder", "encode_mid", "encode_encoders"):
        for shape, res in ((doc["phases"].get(phase) or {}).get("result") or {}).items():
            for workload, every in res["workloads"].items():
                for r in every:
                    what = r["system"] + (", model only" if r.get("model_only") else "")
                    encode_rows.append(
                        f"| {shape} | {workload} | {what} | {r['texts_per_s']:.0f} | {r['tokens_per_s']:.0f} | "
                        f"{r['mfu_measured']:.3f} |"
                    )
    serve = (doc["phases"].get("serve") or {}).get("result")
    if serve:
        served = serve["served"] if "clients" not in serve else {str(serve["clients"]): serve["served"]}
        lines += [
            "Serving (one replica, closed loop of HTTP clients, one document per request; offline: the same model's "
            f"`encode` of the same texts on the same GPU, {serve['offline']['texts_per_s']:.0f} texts/s):",
            "",
            "| clients | texts/s | p50 ms | p99 ms | errors |",
            "|---|---|---|---|---|",
            *[
                f"| {n} | {r['texts_per_s']:.1f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['errors']} |"
                for n, r in served.items()
            ],
            "",
        ]
    if encode_rows:
        lines += [
            'Encoding (texts to normalised vectors; "model only": batches tokenized beforehand):',
            "",
            "| shape | texts | system | texts/s | tokens/s | MFU |",
            "|---|---|---|---|---|---|",
            *encode_rows,
            "",
        ]
    return lines


def experiments_index(results: Path = RESULTS) -> str:
    """Every experiment recorded in the results files (`common.record_experiment`): its date, overrides and
    ratios, one table per result."""
    lines = ["## Index of recorded experiments", ""]
    for path in sorted(results.glob("*.json")):
        experiments = json.loads(path.read_text()).get("experiments") or {}
        if not experiments:
            continue
        lines += [f"### {path.name}", "", "| experiment | date | overrides | ratios |", "|---|---|---|---|"]
        for name, entry in experiments.items():
            overrides = ", ".join(f"`{o}`" for o in entry.get("overrides") or []) or "-"
            ratios = ", ".join(f"{k} {_number(v)}" for k, v in (entry.get("ratios") or {}).items()) or "-"
            lines.append(f"| {name} | {str(entry.get('date', ''))[:10]} | {overrides} | {ratios} |")
        lines.append("")
    return "\n".join(lines)


def with_index(page: str, results: Path = RESULTS) -> str:
    """docs/experiments.md: its written part, then the index of `experiments_index`."""
    return page.split(INDEX_MARK)[0] + INDEX_MARK + "\n\n" + experiments_index(results)


def main() -> None:
    PAGE.write_text(render())
    EXPERIMENTS.write_text(with_index(EXPERIMENTS.read_text()))
    print(f"wrote {PAGE} and the index of {EXPERIMENTS}")


if __name__ == "__main__":
    main()
