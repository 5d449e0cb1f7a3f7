"""Readers for every dataset in the shared data folder (see its MANIFEST.md) into evaluation records.

`SHARED_DATASETS` maps a dataset name to its reader, family, splits and a default task instruction. Families and
the records their readers return:

- `sts`: `ScoredPair` (similarity 0-5, or SICK relatedness 1-5)
- `nli`: `NliPair` (entailment / neutral / contradiction)
- `classification`: `LabelledText`
- `pair`: `ScoredPair` with score 1.0 (paraphrase) or 0.0
- `reranking`: `RerankingGroup` (a question with its relevant and irrelevant candidates)
- `retrieval`: one `BeirDataset` (corpus, queries, graded qrels)

Every reader takes the dataset folder and a split name; a malformed line fails naming the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from embedforge.data.beir import BeirDataset, read_beir
from embedforge.data.delimited import DataFormatError, DelimitedRows, read_csv, read_tsv
from embedforge.data.schema import CorpusDocument, LabelledText, NliPair, Qrel, Query, RerankingGroup, ScoredPair
from embedforge.paths import data_dir

Family = Literal["sts", "nli", "classification", "pair", "reranking", "retrieval"]
NLI_LABELS = ("entailment", "neutral", "contradiction")
RECORD_TYPES: dict[str, type] = {
    "sts": ScoredPair,
    "pair": ScoredPair,
    "nli": NliPair,
    "classification": LabelledText,
    "reranking": RerankingGroup,
    "retrieval": BeirDataset,
}


def _stsb(folder: Path, split: str) -> list[ScoredPair]:
    # no header; genre, file, year, id, score, sentence1, sentence2 (+ two source columns in some rows)
    rows = read_tsv(folder / f"sts-{split}.csv", (7, 9))
    return list(map(ScoredPair, rows.column(5), rows.column(6), rows.floats(4, "score")))


_SICK_HEADER = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment", "split"]


def _sick_rows(folder: Path, split: str) -> tuple[DelimitedRows, list[int]]:
    """SICK's rows and the indices of those in `split` (train, trial or all)."""
    rows = read_tsv(folder / "sick_train_trial.tsv", (6,), header=_SICK_HEADER)
    wanted = {"train", "trial"} if split == "all" else {split}
    return rows, [i for i, s in enumerate(rows.column(5)) if s in wanted]


def _sick_sts(folder: Path, split: str) -> list[ScoredPair]:
    rows, kept = _sick_rows(folder, split)
    a, b, score = rows.column(1), rows.column(2), rows.floats(3, "relatedness score")
    return [ScoredPair(text1=a[i], text2=b[i], score=score[i]) for i in kept]


def _nli_labels(rows: DelimitedRows, index: int) -> list[str]:
    labels = [value.strip().lower() for value in rows.column(index)]
    for i, label in enumerate(labels):
        if label not in NLI_LABELS:
            raise rows.fail(i, f"NLI label {rows.column(index)[i]!r} is not one of {NLI_LABELS}")
    return labels


def _sick_nli(folder: Path, split: str) -> list[NliPair]:
    rows, kept = _sick_rows(folder, split)
    a, b, label = rows.column(1), rows.column(2), _nli_labels(rows, 4)
    return [NliPair(premise=a[i], hypothesis=b[i], label=label[i]) for i in kept]


def _snli(folder: Path, split: str) -> list[NliPair]:
    rows = read_tsv(folder / f"{split}.tsv", (3,), header=["premise", "hypothesis", "label"])
    return list(map(NliPair, rows.column(0), rows.column(1), _nli_labels(rows, 2)))


def _banking77(folder: Path, split: str) -> list[LabelledText]:
    rows = read_csv(folder / f"{split}.csv", ["text", "category"])
    known = set(json.loads((folder / "categories.json").read_text()))
    for i, label in enumerate(rows.column(1)):
        if label not in known:
            raise rows.fail(i, f"category {label!r} is not in categories.json")
    return list(map(LabelledText, rows.column(0), rows.column(1)))


def _emotion(folder: Path, split: str) -> list[LabelledText]:
    path = folder / f"{split}.txt"
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            text, sep, label = line.rstrip("\r\n").rpartition(";")  # texts may contain ';': split on the last
            if n == 1:
                if [text, label] != ["text", "label_name"]:
                    raise DataFormatError(f"{path}:1: expected header 'text;label_name', found {line.strip()!r}")
                continue
            if not line.strip():
                continue
            if not sep or not label:
                raise DataFormatError(f"{path}:{n}: expected 'text;label', found {line.strip()!r}")
            out.append(LabelledText(text=text, label=label))
    return out


def _tweets(folder: Path, split: str) -> list[LabelledText]:
    rows = read_csv(folder / f"{split}.csv", ["textID", "text", "sentiment"])
    return [LabelledText(text=t.strip(), label=s) for t, s in zip(rows.column(1), rows.column(2), strict=True)]


_AMAZON_FILES = {"train": "EN_train", "valid": "EN_valid", "ext_train": "EN-ext_train", "ext_valid": "EN-ext_valid"}


def _unquote(text: str) -> str:
    """The EN-ext files wrap some sentences in CSV-style quotes with doubled inner quotes: undo one layer."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def _amazon(folder: Path, split: str) -> list[LabelledText]:
    rows = read_tsv(folder / f"{_AMAZON_FILES[split]}.tsv", (2,), header=["sentence", "is_counterfactual"])
    labels = rows.require_values(1, ("0", "1"), "is_counterfactual")
    return [LabelledText(text=_unquote(t), label=label) for t, label in zip(rows.column(0), labels, strict=True)]


def _binary(rows: DelimitedRows, index: int) -> list[float]:
    return [float(value) for value in rows.require_values(index, ("0", "1"), "label")]


def _mrpc(folder: Path, split: str) -> list[ScoredPair]:
    rows = read_tsv(folder / f"{split}.tsv", (5,), header=["label", "id1", "id2", "sentence1", "sentence2"])
    return list(map(ScoredPair, rows.column(3), rows.column(4), _binary(rows, 0)))


def _twitter(folder: Path, split: str) -> list[ScoredPair]:
    rows = read_tsv(folder / f"{split}_binary.tsv", (4,), header=["sentence1", "sentence2", "label", "votes"])
    return list(map(ScoredPair, rows.column(0), rows.column(1), _binary(rows, 2)))


def _wikiqa(folder: Path, split: str) -> list[RerankingGroup]:
    rows = read_tsv(folder / f"{split}.tsv", (4,), header=["qid", "question", "candidate", "label"])
    groups: dict[str, RerankingGroup] = {}
    columns = (rows.column(0), rows.column(1), rows.column(2), _binary(rows, 3))
    for i, (qid, question, candidate, label) in enumerate(zip(*columns, strict=True)):
        group = groups.setdefault(qid, RerankingGroup(query_id=qid, query=question))
        if group.query != question:
            raise rows.fail(i, f"qid {qid} has a different question than on its first line")
        (group.positives if label else group.negatives).append(candidate)
    return list(groups.values())


def _wikiqa_collection(folder: Path, split: str) -> BeirDataset:
    """WikiQA as retrieval over one collection: every distinct candidate sentence of both files is a document
    (`w0`, `w1`, ... in order of first appearance), every question a query (`train-Q1`, `dev-Q8`, ...) with its
    correct answers as relevant (grade 1). `split` is `all`: both files' questions."""
    corpus: dict[str, CorpusDocument] = {}
    queries, qrels = [], []
    for part in ("train", "dev"):
        for group in _wikiqa(folder, part):
            for text in group.positives + group.negatives:
                corpus.setdefault(text, CorpusDocument(doc_id=f"w{len(corpus)}", text=text))
            if group.positives:
                queries.append(Query(query_id=f"{part}-{group.query_id}", text=group.query))
                qrels += [Qrel(queries[-1].query_id, corpus[text].doc_id, 1.0) for text in group.positives]
    return BeirDataset(corpus=list(corpus.values()), queries=queries, qrels=qrels, name="wikiqa_retrieval")


@dataclass(frozen=True)
class SharedDataset:
    """A dataset of the shared data folder: where it lives, what it holds, and how to read it."""

    name: str
    folder: str
    family: Family
    splits: tuple[str, ...]
    reader: Callable[[Path, str], Any]
    instruction: str

    @property
    def default_split(self) -> str:
        return self.splits[0]

    def read(self, split: str | None = None, root: Path | None = None) -> Any:
        """Records of `split` (default: the first listed) from `root` (default: the shared data folder)."""
        split = split or self.default_split
        if split not in self.splits:
            raise ValueError(f"shared dataset {self.name!r} has no split {split!r}; splits: {list(self.splits)}")
        folder = (root or data_dir()) / self.folder
        if not folder.is_dir():
            raise FileNotFoundError(f"shared dataset {self.name!r}: folder {folder} not found (EMBEDFORGE_DATA_DIR?)")
        return self.reader(folder, split)


def _retrieval(folder: Path, split: str) -> Any:
    return read_beir(folder, split)


# Default instructions follow NV-Embed's instruction table (NV-Embed appendix; seeds/001).
_ENTRIES = [
    SharedDataset("stsb", "stsb", "sts", ("train", "dev"), _stsb, "Retrieve semantically similar text."),
    SharedDataset("sick", "sick", "sts", ("train", "trial", "all"), _sick_sts, "Retrieve semantically similar text."),
    SharedDataset(
        "sick_nli",
        "sick",
        "nli",
        ("train", "trial", "all"),
        _sick_nli,
        "Given a premise, retrieve a hypothesis that is entailed by the premise",
    ),
    SharedDataset(
        "snli",
        "snli",
        "nli",
        ("dev", "test"),
        _snli,
        "Given a premise, retrieve a hypothesis that is entailed by the premise",
    ),
    SharedDataset(
        "banking77",
        "banking77",
        "classification",
        ("train",),
        _banking77,
        "Given a online banking query, find the corresponding intents",
    ),
    SharedDataset(
        "emotion",
        "emotion",
        "classification",
        ("train", "val"),
        _emotion,
        "Classify the emotion expressed in the given Twitter message into one of the six emotions: "
        "anger, fear, joy, love, sadness, and surprise",
    ),
    SharedDataset(
        "tweet_sentiment_extraction",
        "tweet_sentiment_extraction",
        "classification",
        ("train",),
        _tweets,
        "Classify the sentiment of a given tweet as either positive, negative, or neutral",
    ),
    SharedDataset(
        "amazon_counterfactual",
        "amazon_counterfactual",
        "classification",
        tuple(_AMAZON_FILES),
        _amazon,
        "Classify a given Amazon customer review text as either counterfactual or not-counterfactual",
    ),
    SharedDataset("mrpc", "mrpc", "pair", ("train", "test"), _mrpc, "Retrieve semantically similar text."),
    SharedDataset(
        "twitter_semeval2015",
        "twitter_semeval2015",
        "pair",
        ("dev",),
        _twitter,
        "Retrieve tweets that are semantically similar to the given tweet",
    ),
    SharedDataset(
        "wikiqa",
        "wikiqa",
        "reranking",
        ("train", "dev"),
        _wikiqa,
        "Given a question, retrieve Wikipedia passages that answer the question",
    ),
    SharedDataset(
        "wikiqa_retrieval",
        "wikiqa",
        "retrieval",
        ("all",),
        _wikiqa_collection,
        "Given a question, retrieve Wikipedia passages that answer the question",
    ),
    SharedDataset(
        "trec_dl_msmarco_subset",
        "trec_dl_msmarco_subset",
        "retrieval",
        ("test",),
        _retrieval,
        "Given a web search query, retrieve relevant passages that answer the query",
    ),
    SharedDataset(
        "dbpedia_entity_subset",
        "dbpedia_entity_subset",
        "retrieval",
        ("test",),
        _retrieval,
        "Given a query, retrieve relevant entity descriptions from DBPedia",
    ),
]
SHARED_DATASETS: dict[str, SharedDataset] = {d.name: d for d in _ENTRIES}


def get_shared(name: str) -> SharedDataset:
    if name not in SHARED_DATASETS:
        raise ValueError(f"unknown shared dataset {name!r}; known: {sorted(SHARED_DATASETS)}")
    return SHARED_DATASETS[name]


def read_shared(name: str, split: str | None = None, root: Path | None = None) -> Any:
    """Read a shared dataset by name, e.g. `read_shared("stsb", "dev")` -> list[ScoredPair]."""
    return get_shared(name).read(split, root)
