"""Instruction prefixes (NV-Embed 4, Tables 12-13) and in-context demonstrations (LGAI-Embedding 4.2).

Queries are rendered as `Instruct: {task}\\nQuery: ` + text; documents are bare unless the task is symmetric
(STS, classification, clustering), in which case both sides get the instruction. Optional (query, positive)
demonstrations come before the instruction. The prefix is returned apart from the text: tokenization keeps its
length so pooling can skip it (no separator strings inside the text).
"""

from __future__ import annotations

from collections.abc import Sequence

from embedforge.config.model import InstructionConfig
from embedforge.model.protocol import Demonstration


def render_prefix(instructions: InstructionConfig, task: str | None, examples: Sequence[Demonstration] = ()) -> str:
    """The text placed before a query: demonstrations (if any) then the instruction for `task` (or the default)."""
    demos = "".join(instructions.example_template.format(query=q, positive=p) for q, p in examples)
    return demos + instructions.query_template.format(task=task or instructions.default_task)
