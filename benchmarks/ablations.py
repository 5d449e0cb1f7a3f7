"""What each switch of the generalist recipe is worth on data the run never trained on (issue: what the config turns
on must reach the model).

The generalist profile (configs/local.yaml) is run as shipped and with one technique switched the other way:
the MGH coarse-to-fine curriculum (stage 1), LGAI in-context training examples, and the WildBench judge filter.
Every variant is scored with benchmarks/generalize.py's protocol (whole shared datasets left out of training,
the same seeded samples); a gain is the left-out average with the technique on minus the average with it off, in
points. Variants that leave synthesis and mining alone train on the shipped run's synthetic and mined data.
Writes benchmarks/results/ablations.json.

    .venv/bin/python benchmarks/ablations.py [--only curriculum icl judge] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from generalize import CONFIG, LIMITS, link_shared_stages, protocol_overrides, protocol_tasks, run_protocol


@dataclass(frozen=True)
class Switch:
    """One technique: the overrides that turn it on and off (one of them is the shipped profile's own)."""

    name: str
    on: tuple[str, ...]
    off: tuple[str, ...]
    touches_data: bool  # changes synthesis or mining, so the variant cannot reuse the shipped run's data


SWITCHES = {
    "curriculum": Switch("curriculum", ("train.stages.0.curriculum=mgh",), ("train.stages.0.curriculum=none",), False),
    # a demonstration (query + positive) needs room before the query: the profile's 64 query tokens leave none
    "icl": Switch(
        "icl",
        ("train.in_context.fraction=0.5", "train.in_context.k=1", "model.max_query_length=256"),
        ("train.in_context.fraction=0.0",),
        False,
    ),
    "judge": Switch("judge", ("synth.judge.enabled=true",), ("synth.judge.enabled=false",), True),
}


def variant_overrides(switch: Switch, shipped: dict[str, Any]) -> tuple[str, list[str]]:
    """('on' or 'off', overrides) for the variant that differs from the shipped profile in `switch` alone."""
    from embedforge.config import load_config

    on = load_config(str(CONFIG), list(switch.on)).model_dump()
    return ("off", list(switch.off)) if on == shipped else ("on", list(switch.on))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", nargs="+", choices=sorted(SWITCHES), help="default: every switch")
    parser.add_argument("--runs", type=Path, default=Path("runs/ablations"))
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument(
        "--shipped-run",
        type=Path,
        default=Path("runs/generalize/x1"),
        help="the shipped profile's run under the same protocol (benchmarks/generalize.py's x1); its stages are "
        "reused when their configs match, rerun otherwise",
    )
    args = parser.parse_args()
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    import torch
    from common import machine_info, previous_result, write_result

    from embedforge.cluster.local import start_private_cluster
    from embedforge.config import load_config

    torch.set_num_threads(2)
    machine = machine_info()
    base = load_config(str(CONFIG), args.overrides)
    labels = protocol_tasks(base)
    protocol = protocol_overrides(labels, args.overrides)
    start_private_cluster(2, 1024**3)

    def run(name: str, overrides: list[str], data_from: Path | None, run_dir: Path | None = None) -> dict[str, Any]:
        config = load_config(str(CONFIG), [*protocol, *overrides])
        run_dir = (run_dir or args.runs / name).resolve()
        if data_from is not None:
            link_shared_stages(data_from, run_dir)
        summary = run_protocol(
            config, run_dir, ("deploy",) if data_from is None else ("synth", "mine", "deploy"), labels
        )
        logging.info("%s: %s", name, {k: v for k, v in summary.items() if k != "tasks"})
        return summary

    shipped_dir = args.shipped_run.resolve()
    results = {"shipped": run("shipped", [], None, shipped_dir)}
    ratios: dict[str, float] = {}
    shipped = load_config(str(CONFIG)).model_dump()
    for name in args.only or list(SWITCHES):
        switch = SWITCHES[name]
        state, overrides = variant_overrides(switch, shipped)
        variant = f"{name}_{state}"
        results[variant] = run(variant, overrides, None if switch.touches_data else shipped_dir)
        with_on = results["shipped"] if state == "off" else results[variant]
        with_off = results[variant] if state == "off" else results["shipped"]
        ratios[f"{name}_gain"] = round(with_on["ood_avg_trained"] - with_off["ood_avg_trained"], 2)
        key = "ood_avg_gain_except_classification"  # comparable across classification protocols
        ratios[f"{name}_gain_except_classification"] = round(with_on[key] - with_off[key], 2)
    # switches measured by an earlier run (`--only` another one) stay in the result
    previous = previous_result("ablations")
    results = {**previous.get("results", {}), **results}
    ratios = {**previous.get("ratios", {}), **ratios}
    ratios["contaminated_eval_rows"] = max(r["contaminated_eval_rows"] for r in results.values())
    path = write_result(
        "ablations",
        {
            "machine": machine,
            "config": str(CONFIG.relative_to(CONFIG.parents[1])),
            "overrides": args.overrides,
            "protocol": "benchmarks/generalize.py's: left-out datasets, seeded samples; gain = left-out average of "
            f"the trained model with the technique on minus off, points; limits {LIMITS}",
            "switches": {n: {"on": list(s.on), "off": list(s.off)} for n, s in SWITCHES.items()},
            "results": results,
            "ratios": ratios,
            "goals": {
                "contaminated_eval_rows": "== 0",
                **{f"{n}_gain{suffix}": "reported" for n in SWITCHES for suffix in ("", "_except_classification")},
            },
        },
    )
    print(path.read_text())


if __name__ == "__main__":
    main()
