"""Prompt templates (data files), placeholder sampling, rendering, planned rows and output schemas."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest

from embedforge.config import load_config
from embedforge.data.schema import CorpusDocument
from embedforge.synth.plan import assign_shards, brainstorm_rows, example_rows, grounded_rows, limits_of
from embedforge.synth.schemas import output_schema
from embedforge.synth.templates import load_template, render_judge

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
FAMILIES = ["short-long", "long-short", "short-short", "long-long", "sts", "classification"]


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_renders_both_steps(family: str) -> None:
    template = load_template(family)
    assert template.family == family and template.checklist
    brainstorm = template.render_brainstorm(7)
    assert "7 distinct tasks" in brainstorm and "{" not in brainstorm
    values = template.sample_placeholders("seed-1")
    assert set(values) == set(template.placeholders)
    assert all(values[k] in template.placeholders[k] for k in values)
    prompt = template.render_generate({**values, "task": "Given a bird name, find field guides"}, max_chars=300)
    assert "Given a bird name, find field guides" in prompt
    assert "{" not in prompt and "}" not in prompt
    assert _fields(template.generate) <= {*template.placeholders, "task", "max_words"}


def test_placeholders_are_stable_per_key_and_vary_across_keys() -> None:
    template = load_template("short-long")
    assert template.sample_placeholders("a") == template.sample_placeholders("a")
    draws = {json.dumps(template.sample_placeholders(f"k{i}"), sort_keys=True) for i in range(40)}
    assert len(draws) > 10


def test_missing_placeholder_is_named() -> None:
    with pytest.raises(KeyError, match="difficulty"):
        load_template("short-long").render_generate({"task": "t"}, max_chars=100)


def test_unknown_family_lists_known_ones() -> None:
    with pytest.raises(ValueError, match=r"known: .*short-long"):
        load_template("medium-medium")


def test_judge_prompt_carries_task_example_and_numbered_checklist() -> None:
    prompt = render_judge("Find recipes", {"user_query": "vegan lasagna"}, ["Is it relevant?", "Is it ordered?"])
    assert "Find recipes" in prompt and '"user_query": "vegan lasagna"' in prompt
    assert "1. Is it relevant?\n2. Is it ordered?" in prompt


def test_rows_cover_every_task_and_example(tiny_config) -> None:
    synth = tiny_config.synth.model_copy(update={"tasks_per_family": 2, "examples_per_task": 3})
    b_rows = brainstorm_rows(synth)
    assert [r["family"] for r in b_rows] == synth.families
    tasks = {"short-long": ["Find papers for a title", "Find recipes by name", "ignored third"], "sts": ["Paraphrase"]}
    rows = example_rows(synth, 0, tasks)
    assert len(rows) == 2 * 3 + 1 * 3
    assert len({r["row_id"] for r in rows}) == len(rows)
    assert rows == example_rows(synth, 0, tasks), "planning must be deterministic for resume"
    shards = assign_shards(rows, 4)
    assert [len(v) for v in shards.values()] == [4, 4, 1]


def test_brainstorm_rows_split_large_task_counts(tiny_config) -> None:
    synth = tiny_config.synth.model_copy(update={"tasks_per_family": 45, "tasks_per_brainstorm": 20})
    counts = [json.loads(r["placeholders"])["count"] for r in brainstorm_rows(synth) if r["family"] == "sts"]
    assert counts == ["20", "20", "5"]


def test_grounded_rows_cut_long_documents_in_the_prompt_only(tiny_config) -> None:
    synth = tiny_config.synth.model_copy(update={"max_document_prompt_chars": 50})
    doc = CorpusDocument(doc_id="d1", text="word " * 100, title="Title")
    (row,) = grounded_rows(synth, 0, [doc])
    assert row["document"].startswith("Title word") and len(row["document"]) > 400  # title text, as evaluated
    assert ("word " * 20) not in row["prompt"]
    assert row["doc_id"] == "d1" and row["task"] == synth.documents_instruction


def test_schemas_bound_every_string(tiny_config) -> None:
    limits = limits_of(tiny_config.synth)
    for kind in ("retrieval", "grounded", "sts", "classification"):
        schema = output_schema(kind, limits)
        assert schema["required"] == list(schema["properties"])
        for prop in schema["properties"].values():
            inner = prop.get("items", prop)
            assert inner["maxLength"] <= max(limits.max_document, 60)
    negatives = output_schema("retrieval", limits)["properties"]["hard_negative_documents"]
    assert negatives["minItems"] == negatives["maxItems"] == 4


def test_token_budget_is_checked_with_a_clear_message() -> None:
    from embedforge.config import ConfigError

    with pytest.raises(ConfigError, match=r"max_tokens .* cannot hold a full example"):
        load_config(TINY, ["synth.max_document_chars=4000"])
    with pytest.raises(ConfigError, match=r"judge\.max_tokens"):
        load_config(TINY, ["synth.judge.note_chars=500"])
