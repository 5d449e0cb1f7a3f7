"""Write docs/benchmarks.md from benchmarks/results/*.json, so the page can never drift from the results.

One row per ratio of every result: its value, its goal, whether it is met, the machine and the date; the plots
beside the results are linked under the table. `make bench` runs it after the benchmarks; a test keeps the
committed page equal to what this script writes.

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
    return "\n".join(lines)


def main() -> None:
    PAGE.write_text(render())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
