"""Few-shot query-writing prompts for a user's documents (`prompts/queries.yaml`).

Corpus-grounded queries as in InPars (Bonifacio et al. 2022) and Promptagator (Dai et al. 2023), the query
generation step of GPL (Wang et al. 2022): the generator completes a plain-text pattern of (document, query)
demonstrations, one pattern per query style, and stops at the end of the line. The synthetic data then trains a
retriever as NV-Embed (seed 000) 4.3 trains on its synthetic retrieval examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import yaml

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
        shots = "".join(f"Document: {d['document']}\nQuery: {d[style]}\n\n" for d in self.demonstrations)
        flat = " ".join(document.split())
        return f"Each query is {self.styles[style]}, answered by its document.\n\n{shots}Document: {flat}\nQuery:"


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
