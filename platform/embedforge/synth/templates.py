"""Prompt templates as data files (`prompts/*.yaml`), placeholder sampling and rendering.

Two-step prompting of NV-Embed (seed 000) 4.3 and its ICLR appendix Tables 15-16 (seed 001): a brainstorm prompt
per family asks for task definitions, then one generation prompt per (task, sampled placeholders). The templates
are worded for this project; MGH (seed 002) appendix A.1 adds the four negatives ordered by similarity.
"""

from __future__ import annotations

import json
import random
import string
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
KINDS = ("retrieval", "sts", "classification", "grounded")
CHARS_PER_WORD = 6  # average English word plus its space, to turn character bounds into words in prompts


@dataclass(frozen=True)
class FamilyTemplate:
    """One family's prompts: brainstorm (step 1), generate (step 2), placeholder values and judge checklist."""

    id: str
    family: str
    kind: str
    generate: str
    brainstorm: str = ""
    placeholders: dict[str, list[str]] = field(default_factory=dict)
    checklist: list[str] = field(default_factory=list)

    def sample_placeholders(self, key: str) -> dict[str, str]:
        """Placeholder values drawn with a generator seeded by `key`, so a re-run draws the same ones."""
        rng = random.Random(key)
        return {name: rng.choice(values) for name, values in sorted(self.placeholders.items())}

    def render_brainstorm(self, count: int) -> str:
        if not self.brainstorm:
            raise ValueError(f"template {self.id!r} has no brainstorm prompt")
        return _render(self.brainstorm, {"count": str(count)}, self.id)

    def render_generate(self, values: dict[str, str], max_chars: int) -> str:
        """The generation prompt for one example; `max_chars` bounds each text (stated to the model in words)."""
        return _render(self.generate, {**values, "max_words": str(max(max_chars // CHARS_PER_WORD, 1))}, self.id)


def _render(text: str, values: dict[str, str], template_id: str) -> str:
    needed = {name for _, name, _, _ in string.Formatter().parse(text) if name}
    missing = sorted(needed - values.keys())
    if missing:
        raise KeyError(f"template {template_id!r} needs placeholder(s) {missing}")
    return text.format_map(values).strip()


def _load(path: Path) -> FamilyTemplate:
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a prompt file must be a YAML mapping")
    try:
        template = FamilyTemplate(**raw)
    except TypeError as err:
        raise ValueError(f"{path}: {err}") from None
    if template.kind not in KINDS:
        raise ValueError(f"{path}: kind {template.kind!r} is not one of {KINDS}")
    return template


@cache
def load_template(family: str) -> FamilyTemplate:
    """The template of a family (`short-long`, ..., `classification`) or of `grounded` generation."""
    path = PROMPTS_DIR / f"{family}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PROMPTS_DIR.glob("*.yaml") if p.stem not in ("judge", "queries"))
        raise ValueError(f"no prompt template for family {family!r}; known: {known}")
    return _load(path)


@cache
def judge_template() -> tuple[str, str]:
    """(id, template text) of the WildBench-style judge prompt."""
    raw = yaml.safe_load((PROMPTS_DIR / "judge.yaml").read_text(encoding="utf-8"))
    return raw["id"], raw["template"]


def render_judge(task: str, example: dict[str, object], checklist: list[str]) -> str:
    """The judge prompt for one example: its task, its fields as indented JSON, the family's checklist."""
    template_id, text = judge_template()
    items = "\n".join(f"{i}. {q}" for i, q in enumerate(checklist, start=1))
    return _render(
        text,
        {"task": task, "example": json.dumps(example, ensure_ascii=False, indent=1), "checklist": items},
        template_id,
    )
