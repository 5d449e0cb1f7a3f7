"""Few-shot query-writing prompts for a user's documents (`prompts/queries.yaml`).

Corpus-grounded queries as in InPars (Bonifacio et al. 2022) and Promptagator (Dai et al. 2023), the query
generation step of GPL (Wang et al. 2022): the generator completes a plain-text pattern of (document, query)
demonstrations, one pattern per query style, and stops at the end of the line. The style `examples` is
demonstrated by the user's own queries (Promptagator 3.1, `example_queries.py`). The synthetic data then trains a
retriever as NV-Embed (seed 000) 4.3 trains on its synthetic retrieval examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

from embedforge.synth.example_queries import EXAMPLES_STYLE, EXAMPLES_STYLE_TEXT
from embedforge.synth.templates import PROMPTS_DIR

STOP = "\n"


@dataclass(frozen=True)
class QueryPrompts:
    id: str
    demonstrations: tuple[dict[str, str], ...]
    styles: dict[str, str]

    def render(self, style: str, document: str) -> str:
        """The prompt whose continuation is one `style` query for `document` (ends with `Query:`)."""
        if style not in self.styles:
            raise ValueError(f"unknown query style {style!r}; known: {sorted(self.styles)}")
        shots = "".join(f"Document: {d['document']}\nQuery: {d[style]}\n\n" for d in self.demonstrations if style in d)
        flat = " ".join(document.split())
        return f"Each query is {self.styles[style]}, answered by its document.\n\n{shots}Document: {flat}\nQuery:"

    def with_examples(self, demonstrations: tuple[dict[str, str], ...]) -> QueryPrompts:
        """These prompts and the style `examples`, demonstrated by a user's own queries
        (`synth.example_queries.example_demonstrations`; Promptagator 3.1)."""
        if not demonstrations:
            raise ValueError("the examples style needs at least one demonstration")
        return QueryPrompts(
            id=f"{self.id}+{EXAMPLES_STYLE}",
            demonstrations=self.demonstrations + demonstrations,
            styles={**self.styles, EXAMPLES_STYLE: EXAMPLES_STYLE_TEXT},
        )


@cache
def query_prompts() -> QueryPrompts:
    raw = yaml.safe_load((PROMPTS_DIR / "queries.yaml").read_text(encoding="utf-8"))
    styles = dict(raw["styles"])
    demos = tuple(dict(d) for d in raw["demonstrations"])
    for d in demos:
        missing = sorted(set(styles) - set(d))
        if missing:
            raise ValueError(f"prompts/queries.yaml: a demonstration lacks the style(s) {missing}")
    return QueryPrompts(id=str(raw["id"]), demonstrations=demos, styles=styles)
