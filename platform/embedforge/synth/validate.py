"""Parse and validate generator and judge outputs; every rejection names its reason for the manifest.

NV-Embed (seed 000) 4.3 keeps only well-formed synthetic examples; the checks follow the generation guidelines of
its appendix templates (seed 001: documents must not copy the query, the misleading label must differ from the
label and neither may appear in the text) and MGH (seed 002) 2.1 (four distinct negatives). Malformed output
raises `Rejected` with a short machine-readable reason; callers count it and move on, never crash.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from embedforge.synth.schemas import Limits

COPY_MIN_CHARS = 30  # a query at least this long found inside a document counts as copied


class Rejected(Exception):
    """A generation that cannot be kept; `reason` is the key counted in the manifest's drops."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Candidate:
    """A validated example: negatives ordered from most to least similar (MGH levels 1..k)."""

    query: str
    positive: str
    negatives: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    """A judge's answer (WildBench 3.3): raw score 1-10 and its rescaled value (S - 5) * 2."""

    score: int
    strengths: str
    weaknesses: str

    @property
    def rescaled(self) -> float:
        return rescale(self.score)


def rescale(score: float) -> float:
    """WildBench 3.3: S' = (S - 5) * 2, so 5 (borderline) maps to 0 and the range 1-10 to -8..10."""
    return (score - 5) * 2


def normalize(text: str) -> str:
    """Comparison key: case-folded, whitespace collapsed."""
    return " ".join(text.casefold().split())


def extract_json(text: str) -> Any:
    """The JSON value in `text`: the whole text, else the first balanced object in it (text around the JSON)."""
    stripped = text.strip()
    if not stripped:
        raise Rejected("empty_output")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    block = _first_object(stripped)
    if block is None:
        raise Rejected("invalid_json", "no complete JSON object (truncated or missing)")
    try:
        return json.loads(block)
    except json.JSONDecodeError as err:
        raise Rejected("invalid_json", err.msg) from None


def _first_object(text: str) -> str | None:
    """The balanced `{...}` block that opens at the first brace (braces inside strings do not count)."""
    start = text.find("{")
    if start == -1:
        return None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def clean_text(value: Any, name: str, min_chars: int, max_chars: int | None) -> str:
    """A field's text, NFC-normalised and stripped of control characters, checked for type and length."""
    if not isinstance(value, str):
        raise Rejected("wrong_type", f"{name} is {type(value).__name__}, expected a string")
    text = unicodedata.normalize("NFC", value)
    text = "".join(ch for ch in text if ch in "\n\t" or unicodedata.category(ch) != "Cc").strip()
    if "\ufffd" in text:
        raise Rejected("bad_unicode", f"{name} holds U+FFFD replacement characters")
    if not text:
        raise Rejected("empty_text", name)
    if len(text) < min_chars:
        raise Rejected("too_short", f"{name} has {len(text)} < {min_chars} characters")
    if max_chars is not None and len(text) > max_chars:
        raise Rejected("too_long", f"{name} has {len(text)} > {max_chars} characters")
    return text


def _field(obj: dict[str, Any], name: str) -> Any:
    if name not in obj:
        raise Rejected("missing_field", name)
    return obj[name]


def _negatives(obj: dict[str, Any], name: str, limits: Limits, max_chars: int) -> tuple[str, ...]:
    values = _field(obj, name)
    if not isinstance(values, list):
        raise Rejected("wrong_type", f"{name} is {type(values).__name__}, expected a list")
    if len(values) != limits.num_negatives:
        raise Rejected("wrong_negative_count", f"{len(values)} negatives, expected {limits.num_negatives}")
    texts = tuple(clean_text(v, f"{name}[{i}]", limits.min_chars, max_chars) for i, v in enumerate(values))
    if len({normalize(t) for t in texts}) != len(texts):
        raise Rejected("duplicate_negatives")
    return texts


def _check_distinct(query: str, positive: str, negatives: tuple[str, ...]) -> None:
    q, p = normalize(query), normalize(positive)
    docs = [p, *(normalize(n) for n in negatives)]
    if q in docs:
        raise Rejected("document_equals_query")
    if p in docs[1:]:
        raise Rejected("negative_equals_positive")
    if len(q) >= COPY_MIN_CHARS and any(q in d for d in docs):
        raise Rejected("query_copied", "the query appears verbatim inside a document")


def parse_example(kind: str, text: str, limits: Limits, document: str | None = None) -> Candidate:
    """Validate one generation of `kind`; `document` is the user's text that grounds a `grounded` generation."""
    obj = extract_json(text)
    if not isinstance(obj, dict):
        raise Rejected("wrong_type", f"output is a JSON {type(obj).__name__}, expected an object")
    lo = limits.min_chars
    if kind in ("retrieval", "grounded"):
        query = clean_text(_field(obj, "user_query"), "user_query", lo, limits.max_query)
        if kind == "grounded":
            if document is None:
                raise ValueError("a grounded generation needs the document it was written for")
            positive = clean_text(document, "document", 1, None)
        else:
            positive = clean_text(_field(obj, "positive_document"), "positive_document", lo, limits.max_document)
        negatives = _negatives(obj, "hard_negative_documents", limits, limits.max_document)
    elif kind == "sts":
        query = clean_text(_field(obj, "sentence"), "sentence", lo, limits.max_query)
        positive = clean_text(_field(obj, "similar_sentence"), "similar_sentence", lo, limits.max_query)
        negatives = _negatives(obj, "hard_negative_sentences", limits, limits.max_query)
    elif kind == "classification":
        query = clean_text(_field(obj, "input_text"), "input_text", lo, limits.max_document)
        positive = clean_text(_field(obj, "label"), "label", 1, 60)
        negatives = (clean_text(_field(obj, "misleading_label"), "misleading_label", 1, 60),)
        if normalize(positive) == normalize(negatives[0]):
            raise Rejected("same_labels", "label equals misleading_label")
        for label in (positive, negatives[0]):
            if re.search(rf"\b{re.escape(normalize(label))}\b", normalize(query)):
                raise Rejected("label_in_text", f"{label!r} appears in the input text")
        return Candidate(query, positive, negatives)
    else:
        raise ValueError(f"unknown output kind {kind!r}")
    _check_distinct(query, positive, negatives)
    return Candidate(query, positive, negatives)


def parse_query(text: str, document: str, limits: Limits) -> Candidate:
    """A few-shot completion (queries mode): one line, whitespace collapsed, bounded, not copied from `document`.

    Its negatives are mined later from the whole collection, so the candidate has none."""
    query = clean_text(" ".join(text.split()).strip("\"'"), "query", limits.min_chars, limits.max_query)
    _check_distinct(query, clean_text(document, "document", 1, None), ())
    if limits.max_copied_words is not None:
        run = longest_shared_run(words(query), words(document))
        if run >= limits.max_copied_words:
            raise Rejected("query_copied_run", f"the query repeats {run} of the passage's words in a row")
    return Candidate(query, document, ())


_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lower-cased word tokens, punctuation and spacing left out (a copy that swaps a comma for a period is a copy)."""
    return _WORD.findall(normalize(text))


def longest_shared_run(a: list[str], b: list[str]) -> int:
    """The length of the longest run of words that `a` and `b` share, in order and contiguous (dynamic
    programming over the two sequences, O(len(a) x len(b)): a query against one passage)."""
    best, previous = 0, [0] * (len(b) + 1)
    for word in a:
        current = [0] * (len(b) + 1)
        for j, other in enumerate(b, start=1):
            if word == other:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def parse_tasks(text: str, max_task_chars: int) -> list[str]:
    """Step-1 brainstorm output: distinct, cleaned task sentences (bad entries are skipped, none at all rejects)."""
    obj = extract_json(text)
    tasks = obj.get("tasks") if isinstance(obj, dict) else obj
    if not isinstance(tasks, list):
        raise Rejected("wrong_type", "brainstorm output holds no list of tasks")
    out: dict[str, str] = {}
    for i, value in enumerate(tasks):
        try:
            task = clean_text(value, f"tasks[{i}]", 10, max_task_chars)
        except Rejected:
            continue
        out.setdefault(normalize(task), task)
    if not out:
        raise Rejected("no_tasks", "no usable task in the brainstorm output")
    return list(out.values())


def leaves_room_for_query(instruction_tokens: int, max_query_length: int) -> bool:
    """Whether a task's query instruction (NV-Embed 4: `Instruct: {task}\\nQuery: `), with the input's special
    tokens (`model.tokenization.framing_tokens`), takes at most three quarters of the embedder's query length, so
    the query itself keeps a quarter. A small generator's task sentence can be a run of symbols at 2 characters
    per token; training could not fit any query text after it."""
    return instruction_tokens <= max_query_length * 3 // 4


_SCORE_TEXT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*$")


def parse_judge(text: str) -> Verdict:
    """A judge's JSON answer; the score may be an integer, an integral float or a string such as "7" or "7/10"."""
    try:
        obj = extract_json(text)
    except Rejected as err:
        raise Rejected("judge_invalid_json", err.detail) from None
    if not isinstance(obj, dict) or "score" not in obj:
        raise Rejected("judge_missing_score")
    raw = obj["score"]
    if isinstance(raw, bool):
        raise Rejected("judge_bad_score", f"score is {raw!r}")
    if isinstance(raw, str):
        match = _SCORE_TEXT.match(raw)
        if match is None:
            raise Rejected("judge_bad_score", f"score is {raw!r}")
        raw = float(match.group(1))
    if not isinstance(raw, int | float) or float(raw) != int(raw):
        raise Rejected("judge_bad_score", f"score is {raw!r}")
    score = int(raw)
    if not 1 <= score <= 10:
        raise Rejected("judge_score_out_of_range", f"score {score} outside 1-10")
    notes = [obj.get(k, "") for k in ("strengths", "weaknesses")]
    strengths, weaknesses = (n if isinstance(n, str) else json.dumps(n) for n in notes)
    return Verdict(score, strengths.strip(), weaknesses.strip())
