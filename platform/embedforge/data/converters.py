"""Pure converters from evaluation-style records to training examples, as the papers build their training sets.

Each converter returns a `Converted` (examples plus drop counts keyed by reason) and never reads files. Ids are
deterministic: a hash of the task name, instruction, query and positive, so a re-run produces the same ids.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from embedforge.data.beir import BeirDataset
from embedforge.data.schema import (
    CorpusDocument,
    LabelledText,
    NliPair,
    RerankingGroup,
    ScoredPair,
    TrainingExample,
)

STS_POSITIVE_THRESHOLD = 4.0  # NV-Embed 4.2: STS pairs scored >= 4 (of 5) are positives


@dataclass
class Converted:
    examples: list[TrainingExample] = field(default_factory=list)
    drops: Counter[str] = field(default_factory=Counter)

    def drop(self, reason: str, n: int = 1) -> None:
        self.drops[reason] += n


def example_id(task_name: str, instruction: str, query: str, positive: str) -> str:
    digest = hashlib.sha1("\x1f".join((task_name, instruction, query, positive)).encode()).hexdigest()[:16]
    return f"{task_name}-{digest}"


def make_example(
    task_name: str,
    task_type: str,
    instruction: str,
    query: str,
    positive: str,
    negatives: list[str] | None = None,
    provenance: dict | None = None,
    relevance: float | None = None,
    max_relevance: float | None = None,
) -> TrainingExample:
    return TrainingExample(
        id=example_id(task_name, instruction, query, positive),
        task_name=task_name,
        task_type=task_type,
        instruction=instruction,
        query=query,
        positive=positive,
        negatives=list(negatives or []),
        relevance=relevance,
        max_relevance=max_relevance,
        provenance=json.dumps(provenance or {}, sort_keys=True),
    )


def deduplicate(converted: Converted) -> Converted:
    """Keep the first example per (task, instruction, query, positive); later copies are dropped (LGAI 3)."""
    seen: set[str] = set()
    out = Converted(drops=Counter(converted.drops))
    for ex in converted.examples:
        if ex.id in seen:
            out.drop("duplicate (query, positive)")
            continue
        seen.add(ex.id)
        out.examples.append(ex)
    return out


def _clean(text: str) -> str:
    return text.strip()


def nli_to_examples(
    pairs: Iterable[NliPair], task_name: str, instruction: str, task_type: str = "retrieval"
) -> Converted:
    """LGAI 3: premise as query, each entailed hypothesis a positive, the contradicting hypotheses of the same
    premise its hard negatives; neutral pairs are dropped, and so are premises with no entailed hypothesis."""
    by_premise: dict[str, dict[str, list[str]]] = defaultdict(lambda: {"entailment": [], "contradiction": []})
    out = Converted()
    for p in pairs:
        premise, hypothesis = _clean(p.premise), _clean(p.hypothesis)
        if not premise or not hypothesis:
            out.drop("empty text")
        elif p.label == "neutral":
            out.drop("neutral label")
        elif p.label in ("entailment", "contradiction"):
            by_premise[premise][p.label].append(hypothesis)
        else:
            raise ValueError(f"{task_name}: NLI label {p.label!r} is not entailment, neutral or contradiction")
    provenance = {"source": task_name, "converter": "nli", "paper": "LGAI 3"}
    for premise, hyps in by_premise.items():
        if not hyps["entailment"]:
            out.drop("premise without an entailed hypothesis", len(hyps["contradiction"]))
            continue
        negatives = list(dict.fromkeys(hyps["contradiction"]))
        for positive in hyps["entailment"]:
            example = make_example(task_name, task_type, instruction, premise, positive, negatives, provenance)
            out.examples.append(example)
    return deduplicate(out)


def similar_pairs_to_examples(
    pairs: Iterable[ScoredPair],
    task_name: str,
    instruction: str,
    threshold: float = STS_POSITIVE_THRESHOLD,
    task_type: str = "sts",
) -> Converted:
    """NV-Embed 4.2: every pair scoring >= `threshold` gives two examples, a->b and b->a (negatives are mined
    later). With threshold 1 this also turns paraphrase-labelled pairs (MRPC, Twitter) into examples."""
    out = Converted()
    provenance = {"source": task_name, "converter": "similar_pairs", "threshold": threshold, "paper": "NV-Embed 4.2"}
    for p in pairs:
        a, b = _clean(p.text1), _clean(p.text2)
        if not a or not b:
            out.drop("empty text")
        elif p.score < threshold:
            out.drop(f"score below {threshold:g}")
        elif a == b:
            out.drop("identical texts")
        else:
            out.examples.append(make_example(task_name, task_type, instruction, a, b, provenance=provenance))
            out.examples.append(make_example(task_name, task_type, instruction, b, a, provenance=provenance))
    return deduplicate(out)


def labelled_to_examples(
    texts: Iterable[LabelledText],
    task_name: str,
    instruction: str,
    num_negatives: int,
    seed: int = 0,
    task_type: str = "classification",
) -> Converted:
    """NV-Embed 4.2 / 5.2.4 example-based classification and clustering: the query is an example text, the
    positive a different example of the same class, the negatives examples of other classes (drawn with `seed`)."""
    if num_negatives < 0:
        raise ValueError(f"num_negatives must be >= 0, got {num_negatives}")
    rng = random.Random(seed)
    by_label: dict[str, list[str]] = defaultdict(list)
    out = Converted()
    for t in texts:
        text = _clean(t.text)
        if not text:
            out.drop("empty text")
            continue
        by_label[t.label].append(text)
    by_label = {label: list(dict.fromkeys(items)) for label, items in by_label.items()}
    labels = sorted(by_label)
    if len(labels) < 2:
        raise ValueError(f"{task_name}: example-based training needs at least 2 classes, found {labels}")
    provenance = {"source": task_name, "converter": "example_based", "paper": "NV-Embed 4.2, 5.2.4"}
    for label in labels:
        items = by_label[label]
        if len(items) < 2:
            out.drop("class with a single example", len(items))
            continue
        others = [lab for lab in labels if lab != label]
        for i, query in enumerate(items):
            j = rng.randrange(len(items) - 1)
            positive = items[j if j < i else j + 1]
            negatives = [rng.choice(by_label[rng.choice(others)]) for _ in range(num_negatives)]
            prov = {**provenance, "label": label}
            out.examples.append(make_example(task_name, task_type, instruction, query, positive, negatives, prov))
    return deduplicate(out)


def groups_to_examples(
    groups: Iterable[RerankingGroup], task_name: str, instruction: str, task_type: str = "retrieval"
) -> Converted:
    """LGAI 3: a query with several positives becomes one example per positive, then duplicates are removed.
    The group's judged-irrelevant candidates are kept as its hard negatives."""
    out = Converted()
    provenance = {"source": task_name, "converter": "multi_positive", "paper": "LGAI 3"}
    for g in groups:
        query = _clean(g.query)
        positives = [t for t in map(_clean, g.positives) if t]
        if not query or not positives:
            out.drop("query without a positive")
            continue
        negatives = list(dict.fromkeys(t for t in map(_clean, g.negatives) if t and t not in positives))
        prov = {**provenance, "query_id": g.query_id}
        for positive in positives:
            out.examples.append(make_example(task_name, task_type, instruction, query, positive, negatives, prov))
    return deduplicate(out)


def title_body_to_examples(
    documents: Iterable[CorpusDocument], task_name: str, instruction: str, task_type: str = "retrieval"
) -> Converted:
    """NV-Embed 4.2's (title, body) pairs (StackExchange, Reddit): a titled document's title is the query, its text
    the positive (negatives are mined later). Untitled documents, and those whose text is only the title, are
    dropped."""
    out = Converted()
    provenance = {"source": task_name, "converter": "title_body", "paper": "NV-Embed 4.2"}
    for doc in documents:
        title, text = _clean(doc.title), _clean(doc.text)
        if not title:
            out.drop("document without a title")
        elif text == title:
            out.drop("text is only the title")
        else:
            prov = {**provenance, "doc_id": doc.doc_id}
            out.examples.append(make_example(task_name, task_type, instruction, title, text, provenance=prov))
    return deduplicate(out)


def cropped_to_examples(
    documents: Iterable[CorpusDocument],
    task_name: str,
    instruction: str,
    words: tuple[int, int],
    seed: int = 0,
    task_type: str = "retrieval",
) -> Converted:
    """Queries cut from the documents themselves, no generator: each document gives one query, a contiguous span of
    its text of `words` (low, high) words, its length and place drawn with a generator seeded by the document id
    (Contriever, Izacard et al. 2022, 3.1's random cropping; the inverse cloze task of Lee et al. 2019). The
    document is the positive. A span is always shorter than its document: documents of `low` words or fewer are
    dropped."""
    low, high = words
    out = Converted()
    provenance = {"source": task_name, "converter": "cropped", "paper": "Contriever 3.1"}
    for doc in documents:
        tokens = _clean(doc.text).split()
        if len(tokens) <= low:
            out.drop(f"document of {low} words or fewer")
            continue
        rng = random.Random(f"{seed}:{task_name}:{doc.doc_id}")
        size = rng.randint(low, min(high, len(tokens) - 1))
        first = rng.randint(0, len(tokens) - size)
        query = " ".join(tokens[first : first + size])
        prov = {**provenance, "doc_id": doc.doc_id}
        out.examples.append(make_example(task_name, task_type, instruction, query, doc.embedded_text, provenance=prov))
    return deduplicate(out)


def qrels_to_examples(beir: BeirDataset, task_name: str, instruction: str, task_type: str = "retrieval") -> Converted:
    """Retrieval examples from BEIR qrels: one per judged-relevant (query, document), carrying its graded
    relevance r and the collection's top grade R for graded pair-relevance labels (paper 004 sec. 6)."""
    out = Converted()
    queries = {q.query_id: q.text for q in beir.queries}
    max_relevance = max((q.relevance for q in beir.qrels), default=0.0)
    provenance = {"source": task_name, "converter": "qrels", "collection": beir.name}
    for qrel in beir.qrels:
        doc = beir.doc(qrel.doc_id)
        if qrel.relevance <= 0:
            out.drop("relevance 0")
        elif qrel.query_id not in queries:
            out.drop("qrel for an unknown query id")
        elif doc is None:
            out.drop("qrel for an unknown document id")
        else:
            positive = f"{doc.title}\n{doc.text}".strip() if doc.title else doc.text
            prov = {**provenance, "query_id": qrel.query_id, "doc_id": qrel.doc_id}
            out.examples.append(
                make_example(
                    task_name,
                    task_type,
                    instruction,
                    queries[qrel.query_id],
                    positive,
                    provenance=prov,
                    relevance=qrel.relevance,
                    max_relevance=max_relevance,
                )
            )
    return deduplicate(out)
