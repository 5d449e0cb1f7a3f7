"""Every command a user can copy from the README and the guide is run by a named test or demo, or the list says why
it cannot run on a machine without a GPU, Kubernetes or a cloud account. A command added to the docs fails this
test until the list names what runs it; a test that stops running its command fails it too (its marker is gone)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/guide.md")
PROGRAMS = ("make", "embedforge", "ray", "serve", "kubectl", "curl", "tensorboard", "docker")

WALK = "tests/pipeline/test_readme_walk.py"
# a doc command's leading words -> (the file that runs it, a string that file holds where it runs it)
RUN_BY: dict[str, tuple[str, str]] = {
    "make demo-generalist": ("Makefile", "embedforge.pipeline.demo configs/local.yaml"),
    "make demo-smoke": ("tests/foundation/test_local_cluster.py", "jobs/smoke.py"),
    "make demo": ("Makefile", "embedforge.pipeline.demo configs/documents.yaml"),
    "make test": (".ci/run", "make test"),
    "make lint": ("Makefile", "ruff format --check"),
    "make cluster-up": (WALK, '"cluster", "up"'),
    "make cluster-down": (WALK, '"cluster", "down"'),
    "make gpu-bench": ("tests/foundation/test_bench_gpu.py", "benchmarks"),  # its tiny mode, on the CPU
    "embedforge config check": (WALK, '"config", "check"'),
    "embedforge models prepare": ("tests/foundation/test_models_prepare.py", "prepare"),
    "embedforge cluster up": (WALK, '"cluster", "up"'),
    "embedforge synth": (WALK, '"synth", TINY'),
    "embedforge mine": (WALK, '"mine", TINY'),
    "embedforge train": (WALK, "jobs/train.py"),  # jobs/train.py is `embedforge train` as a Ray job
    "embedforge eval": (WALK, '"eval", TINY'),
    "embedforge serve": (WALK, '"serve", TINY'),
    "embedforge run": (WALK, '"run", TINY'),
    "ray job submit": (WALK, '"ray", "job", "submit"'),
    "ray start": ("tests/pipeline/test_e2e_pipeline.py", "ray start --address"),
    "serve deploy": (WALK, '"serve", "deploy", "configs/serve/local.yaml"'),
    "serve run": ("tests/serve/test_serve_config.py", "app_builder(app.args)"),  # the app serve deploy runs
    "curl": (WALK, '"curl"'),
    "tensorboard --logdir": (WALK, '"tensorboard", "--logdir"'),
}
# commands that need what this machine lacks; what checks them here instead
CANNOT_RUN_HERE: dict[str, str] = {
    "make gpu-check": "needs a GPU (tests/pipeline/test_gpu_check.py checks its no-GPU answer and its verdicts)",
    "make bench": "every benchmark in turn, hours on 2 cores; results are committed in benchmarks/results",
    "kubectl": "needs a Kubernetes cluster with KubeRay (tests/pipeline/test_cluster_specs.py checks the specs)",
    "ray up": "needs a cloud account (test_cluster_specs.py validates the launcher config)",
    "ray dashboard": "needs a cloud account (test_cluster_specs.py validates the launcher config)",
    "ray down": "needs a cloud account (test_cluster_specs.py validates the launcher config)",
    "docker build": "builds the CUDA image for KubeRay (test_cluster_specs.py checks its Ray version)",
}


def _commands(text: str) -> list[str]:
    """Shell lines in the doc's plain fenced blocks (continuations joined, comments cut) and inline code spans that
    start with a program the docs tell users to run."""
    found = []
    for lang, body in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
        if lang in ("", "bash", "sh", "shell"):
            for line in body.replace("\\\n", " ").splitlines():
                found.append(" ".join(line.split("  #")[0].split()))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += re.findall(r"`([^`\n]+)`", prose)
    # not "embedforge run|synth|..." (a list of commands) nor "serve error: ..." (what one prints)
    shown = [c for c in found if len(c.split()) > 1 and c.split()[0] in PROGRAMS]
    return [c for c in shown if "|" not in c.split()[1] and not c.split()[1].endswith(":")]


def _entry(command: str) -> str | None:
    words = " ".join(command.split())
    keys = [k for k in (*RUN_BY, *CANNOT_RUN_HERE) if words == k or words.startswith(k + " ")]
    return max(keys, key=len) if keys else None


def _doc_commands() -> dict[str, list[str]]:
    return {doc: _commands((REPO / doc).read_text()) for doc in DOCS}


def test_every_doc_command_is_run_by_a_test_or_says_why_not():
    unlisted = [(doc, c) for doc, commands in _doc_commands().items() for c in commands if _entry(c) is None]
    assert not unlisted, f"commands the docs show that no test or demo runs: {unlisted}"


def test_the_runners_run_their_commands():
    for command, (path, marker) in RUN_BY.items():
        assert marker in (REPO / path).read_text(), f"{path} no longer runs `{command}` ({marker!r} not found)"


def test_every_listed_command_is_in_the_docs():
    used = {_entry(c) for commands in _doc_commands().values() for c in commands}
    stale = sorted((set(RUN_BY) | set(CANNOT_RUN_HERE)) - used)
    assert not stale, f"listed but shown by no doc: {stale}"


def test_the_extractor_reads_blocks_continuations_and_inline_spans():
    text = (
        "Run `make demo` then `embedforge a|b`\n"
        "```\nray job submit --x \\\n    -- python a.py  # note\nls -l\n```\n`pip list`\n"
    )
    assert _commands(text) == ["ray job submit --x -- python a.py", "make demo"]
    assert _entry("ray job submit --x -- python a.py") == "ray job submit"
    assert _entry("make demo-smoke") == "make demo-smoke" and _entry("make demos") is None
