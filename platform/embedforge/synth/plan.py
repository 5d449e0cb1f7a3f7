"""The prompts of a synth run, as rows for Ray Data: brainstorm rows (step 1), then example rows (step 2) or, in
corpus-grounded mode, one row per user document. Row ids are stable, so shards can be resumed.

Two-step prompting: NV-Embed (seed 000) 4.3; placeholders from its ICLR appendix Tables 15-16 (seed 001).
"""

from __future__ import annotations

import json
import math
from typing import Any

from embedforge.config.synth import CHARS_PER_TOKEN, JSON_OVERHEAD_TOKENS, SynthConfig
from embedforge.data.schema import CorpusDocument
from embedforge.synth.query_prompts import QueryPrompts
from embedforge.synth.schemas import Limits, brainstorm_schema, output_schema
from embedforge.synth.templates import load_template

QUERY_KIND = "grounded_query"  # a few-shot completion (query_rows), not a chat turn
TASK_TYPES = {
    "retrieval": "retrieval",
    "grounded": "retrieval",
    QUERY_KIND: "retrieval",
    "sts": "sts",
    "classification": "classification",
}


def limits_of(config: SynthConfig) -> Limits:
    return Limits(
        config.min_chars,
        config.max_query_chars,
        config.max_document_chars,
        config.num_negatives,
        config.max_copied_words,
    )


def _row(
    row_id: str,
    phase: str,
    family: str,
    kind: str,
    task: str,
    prompt: str,
    schema: dict[str, Any],
    max_tokens: int,
    template: str,
    placeholders: dict[str, str],
    document: str = "",
    doc_id: str = "",
) -> dict[str, Any]:
    return {
        "row_id": row_id,
        "phase": phase,
        "family": family,
        "kind": kind,
        "task": task,
        "prompt": prompt,
        "schema": json.dumps(schema),
        "max_tokens": max_tokens,
        "template": template,
        "placeholders": json.dumps(placeholders, sort_keys=True),
        "document": document,
        "doc_id": doc_id,
    }


def brainstorm_rows(config: SynthConfig) -> list[dict[str, Any]]:
    """Step 1: per family, enough prompts to ask for `tasks_per_family` task definitions."""
    rows = []
    budget_cap = config.generator.max_model_len // 2
    for family in config.families:
        template = load_template(family)
        remaining = config.tasks_per_family
        for i in range(math.ceil(config.tasks_per_family / config.tasks_per_brainstorm)):
            count = min(config.tasks_per_brainstorm, remaining)
            remaining -= count
            max_tokens = min(count * config.max_task_chars // CHARS_PER_TOKEN + JSON_OVERHEAD_TOKENS, budget_cap)
            rows.append(
                _row(
                    f"brainstorm:{family}:{i}",
                    "brainstorm",
                    family,
                    "brainstorm",
                    "",
                    template.render_brainstorm(count),
                    brainstorm_schema(count, config.max_task_chars),
                    max_tokens,
                    template.id,
                    {"count": str(count)},
                )
            )
    return rows


def example_rows(config: SynthConfig, seed: int, tasks: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Step 2: one prompt per (task, example index) with placeholders drawn from a seed-stable generator."""
    limits = limits_of(config)
    rows = []
    for family in config.families:
        template = load_template(family)
        schema = output_schema(template.kind, limits)
        max_chars = limits.max_query if template.kind == "sts" else limits.max_document
        for t, task in enumerate(tasks.get(family, [])[: config.tasks_per_family]):
            for j in range(config.examples_per_task):
                row_id = f"{family}:{t:05d}:{j:03d}"
                values = template.sample_placeholders(f"{seed}:{row_id}:{task}")
                prompt = template.render_generate({**values, "task": task}, max_chars)
                rows.append(
                    _row(
                        row_id,
                        "example",
                        family,
                        template.kind,
                        task,
                        prompt,
                        schema,
                        config.generator.max_tokens,
                        template.id,
                        values,
                    )
                )
    return rows


def grounded_rows(config: SynthConfig, seed: int, documents: list[CorpusDocument]) -> list[dict[str, Any]]:
    """Corpus-grounded mode: one prompt per user document asking for a query and four graded negatives."""
    template = load_template("grounded")
    schema = output_schema("grounded", limits_of(config))
    rows = []
    for doc in documents:
        text = doc.embedded_text
        row_id = f"doc:{doc.doc_id}"
        values = template.sample_placeholders(f"{seed}:{row_id}")
        shown = text[: config.max_document_prompt_chars]
        prompt = template.render_generate({**values, "document": shown}, config.max_document_chars)
        rows.append(
            _row(
                row_id,
                "example",
                "grounded",
                "grounded",
                config.documents_instruction,
                prompt,
                schema,
                config.generator.max_tokens,
                template.id,
                values,
                document=text,
                doc_id=doc.doc_id,
            )
        )
    return rows


def query_rows(
    config: SynthConfig, seed: int, documents: list[CorpusDocument], prompts: QueryPrompts
) -> list[dict[str, Any]]:
    """Corpus-grounded queries mode: one few-shot completion prompt per (document, query style), no schema."""
    rows = []
    for doc in documents:
        text = doc.embedded_text
        shown = text[: config.max_document_prompt_chars]
        for style in config.query_styles:
            rows.append(
                _row(
                    f"doc:{doc.doc_id}:{style}",
                    "example",
                    "grounded",
                    QUERY_KIND,
                    config.documents_instruction,
                    prompts.render(style, shown),
                    {},
                    config.max_query_tokens,
                    prompts.id,
                    {"style": style},
                    document=text,
                    doc_id=doc.doc_id,
                )
            )
    return rows


def assign_shards(rows: list[dict[str, Any]], shard_size: int) -> dict[int, list[dict[str, Any]]]:
    """Consecutive rows grouped into shards of `shard_size`; each row learns its shard index."""
    shards: dict[int, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        row["shard"] = i // shard_size
        shards.setdefault(row["shard"], []).append(row)
    return shards
