"""Shared benchmark helpers: describe the machine and write `benchmarks/results/<name>.json`."""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Cores, memory, CPU model, load and library versions: what a reader needs to compare two results."""
    import psutil
    import torch

    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 1024**3, 1),
        "load_average_1m": os.getloadavg()[0],
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _check(name: str, payload: dict[str, Any]) -> None:
    missing = [key for key in ("ratios", "goals") if key not in payload]
    if missing:
        raise ValueError(f"benchmark result {name!r} lacks {missing}")
    ratios, goals = payload["ratios"], payload["goals"]
    if not isinstance(ratios, dict) or not all(isinstance(v, int | float) for v in ratios.values()):
        raise ValueError(f"benchmark result {name!r}: 'ratios' must map names to numbers, got {ratios!r}")
    if not isinstance(goals, dict):
        raise ValueError(f"benchmark result {name!r}: 'goals' must map names to targets, got {goals!r}")


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write `payload` to benchmarks/results/<name>.json. It must hold "ratios" (name -> number) and "goals"
    (name -> target); "machine" and "date" are filled in when the payload does not carry them, and the
    experiments recorded in the file so far (`record_experiment`) stay unless the payload carries its own."""
    _check(name, payload)
    machine = payload.get("machine") or machine_info()
    experiments = previous_result(name).get("experiments")
    kept = {"experiments": experiments} if experiments and "experiments" not in payload else {}
    payload = {"name": name, "date": machine["date"], "machine": machine, **payload, **kept}
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path


def previous_result(name: str) -> dict[str, Any]:
    """benchmarks/results/<name>.json as last written, or {} when there is none."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def record_experiment(name: str, experiment: str, entry: dict[str, Any], goals: dict[str, Any]) -> Path:
    """Add one named experiment (a variant of a benchmark's recipe, same protocol) to <name>.json under
    "experiments", keeping the benchmark's own result and every other experiment; whatever it scores is kept."""
    payload = previous_result(name) or {"ratios": {}, "goals": goals}
    payload.setdefault("experiments", {})[experiment] = entry
    payload.pop("name", None)
    payload.pop("date", None)
    return write_result(name, payload)
