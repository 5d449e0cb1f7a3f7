"""Readers for a user's own evaluation files; a malformed line fails naming the file and the line.

- scored pairs (STS, pair classification): `.jsonl` objects `{"text1", "text2", "score"}` or `.tsv` rows
  `text1<TAB>text2<TAB>score` (an optional first line `text1 text2 score` is a header);
- labelled texts (classification, clustering): `.jsonl` `{"text", "label"}` or `.tsv` `text<TAB>label`
  (optional header `text label`);
- reranking groups: `.jsonl` `{"query", "positives": [...], "negatives": [...]}` (optional `"query_id"`).
Retrieval tasks are BEIR folders, read by `embedforge.data.beir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from embedforge.data.delimited import DataFormatError, DelimitedRows, first_line, read_tsv, require_text
from embedforge.data.io import iter_jsonl
from embedforge.data.schema import LabelledText, RerankingGroup, ScoredPair

SUFFIXES = (".jsonl", ".tsv")


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise FileNotFoundError(f"evaluation file {path} does not exist")
    if path.suffix not in SUFFIXES:
        raise DataFormatError(f"{path}: unsupported file type {path.suffix!r}; use one of {SUFFIXES}")


def _tsv_rows(path: Path, header: list[str]) -> DelimitedRows:
    first = first_line(path).split("\t")
    has_header = [f.strip().lower() for f in first] == header
    return read_tsv(path, (len(header),), skip_header=has_header)


def _texts(rows: DelimitedRows, index: int, what: str) -> list[str]:
    """The column's values stripped; an empty one fails naming its line."""
    return [require_text(rows.path, rows.line(i), value, what) for i, value in enumerate(rows.column(index))]


def _json_text(path: Path, lineno: int, obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise DataFormatError(f"{path}:{lineno}: {key!r} must be a string, got {type(value).__name__}")
    return require_text(path, lineno, value, key)


def read_scored_pairs(path: str | Path) -> list[ScoredPair]:
    path = Path(path)
    _check_file(path)
    if path.suffix == ".tsv":
        rows = _tsv_rows(path, ["text1", "text2", "score"])
        pairs = zip(_texts(rows, 0, "text1"), _texts(rows, 1, "text2"), rows.floats(2, "score"), strict=True)
        return _nonempty(path, [ScoredPair(*pair) for pair in pairs])
    out = []
    for n, obj in iter_jsonl(path):
        score = obj.get("score")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise DataFormatError(f"{path}:{n}: 'score' must be a number, got {score!r}")
        out.append(ScoredPair(_json_text(path, n, obj, "text1"), _json_text(path, n, obj, "text2"), float(score)))
    return _nonempty(path, out)


def read_labelled_texts(path: str | Path) -> list[LabelledText]:
    path = Path(path)
    _check_file(path)
    if path.suffix == ".tsv":
        rows = _tsv_rows(path, ["text", "label"])
        out = list(map(LabelledText, _texts(rows, 0, "text"), _texts(rows, 1, "label")))
    else:
        out = [LabelledText(_json_text(path, n, o, "text"), str(_label(path, n, o))) for n, o in iter_jsonl(path)]
    return _nonempty(path, out)


def _label(path: Path, lineno: int, obj: dict[str, Any]) -> str | int:
    value = obj.get("label")
    if not isinstance(value, str | int) or isinstance(value, bool) or str(value).strip() == "":
        raise DataFormatError(f"{path}:{lineno}: 'label' must be a non-empty string or an integer, got {value!r}")
    return value


def read_reranking_groups(path: str | Path) -> list[RerankingGroup]:
    path = Path(path)
    _check_file(path)
    if path.suffix != ".jsonl":
        raise DataFormatError(f"{path}: reranking files must be .jsonl")
    out = []
    for n, obj in iter_jsonl(path):
        lists = {}
        for key in ("positives", "negatives"):
            value = obj.get(key)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise DataFormatError(f"{path}:{n}: {key!r} must be a list of non-empty strings")
            lists[key] = value
        out.append(
            RerankingGroup(query_id=str(obj.get("query_id", n)), query=_json_text(path, n, obj, "query"), **lists)
        )
    return _nonempty(path, out)


def _nonempty(path: Path, records: list) -> list:
    if not records:
        raise DataFormatError(f"{path}: no records")
    return records
