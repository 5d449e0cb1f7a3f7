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
from embedforge.data.delimited import DataFormatError, iter_csv, iter_tsv, parse_float
from embedforge.data.schema import LabelledText, NliPair, RerankingGroup, ScoredPair
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
    path = folder / f"sts-{split}.csv"
    return [
        ScoredPair(text1=f[5], text2=f[6], score=parse_float(path, n, f[4], "score")) for n, f in iter_tsv(path, (7, 9))
    ]


_SICK_HEADER = ["pair_ID", "sentence_A", "sentence_B", "relatedness_score", "entailment_judgment", "split"]


def _sick_rows(folder: Path, split: str) -> list[tuple[Path, int, list[str]]]:
    path = folder / "sick_train_trial.tsv"
    wanted = {"train", "trial"} if split == "all" else {split}
    return [(path, n, f) for n, f in iter_tsv(path, (6,), header=_SICK_HEADER) if f[5] in wanted]


def _sick_sts(folder: Path, split: str) -> list[ScoredPair]:
    return [
        ScoredPair(text1=f[1], text2=f[2], score=parse_float(p, n, f[3], "relatedness score"))
        for p, n, f in _sick_rows(folder, split)
    ]


def _nli_label(path: Path, lineno: int, value: str) -> str:
    label = value.strip().lower()
    if label not in NLI_LABELS:
        raise DataFormatError(f"{path}:{lineno}: NLI label {value!r} is not one of {NLI_LABELS}")
    return label


def _sick_nli(folder: Path, split: str) -> list[NliPair]:
    return [
        NliPair(premise=f[1], hypothesis=f[2], label=_nli_label(p, n, f[4])) for p, n, f in _sick_rows(folder, split)
    ]


def _snli(folder: Path, split: str) -> list[NliPair]:
    path = folder / f"{split}.tsv"
    return [
        NliPair(premise=f[0], hypothesis=f[1], label=_nli_label(path, n, f[2]))
        for n, f in iter_tsv(path, (3,), header=["premise", "hypothesis", "label"])
    ]


def _banking77(folder: Path, split: str) -> list[LabelledText]:
    path = folder / f"{split}.csv"
    known = set(json.loads((folder / "categories.json").read_text()))
    out = []
    for n, (text, label) in iter_csv(path, ["text", "category"]):
        if label not in known:
            raise DataFormatError(f"{path}:{n}: category {label!r} is not in categories.json")
        out.append(LabelledText(text=text, label=label))
    return out


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
    path = folder / f"{split}.csv"
    return [LabelledText(text=t.strip(), label=s) for _, (_, t, s) in iter_csv(path, ["textID", "text", "sentiment"])]


_AMAZON_FILES = {"train": "EN_train", "valid": "EN_valid", "ext_train": "EN-ext_train", "ext_valid": "EN-ext_valid"}


def _unquote(text: str) -> str:
    """The EN-ext files wrap some sentences in CSV-style quotes with doubled inner quotes: undo one layer."""
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def _amazon(folder: Path, split: str) -> list[LabelledText]:
    path = folder / f"{_AMAZON_FILES[split]}.tsv"
    out = []
    for n, (text, label) in iter_tsv(path, (2,), header=["sentence", "is_counterfactual"]):
        if label not in ("0", "1"):
            raise DataFormatError(f"{path}:{n}: is_counterfactual {label!r} is not 0 or 1")
        out.append(LabelledText(text=_unquote(text), label=label))
    return out


def _binary(path: Path, lineno: int, value: str) -> float:
    if value not in ("0", "1"):
        raise DataFormatError(f"{path}:{lineno}: label {value!r} is not 0 or 1")
    return float(value)


def _mrpc(folder: Path, split: str) -> list[ScoredPair]:
    path = folder / f"{split}.tsv"
    rows = iter_tsv(path, (5,), header=["label", "id1", "id2", "sentence1", "sentence2"])
    return [ScoredPair(text1=f[3], text2=f[4], score=_binary(path, n, f[0])) for n, f in rows]


def _twitter(folder: Path, split: str) -> list[ScoredPair]:
    path = folder / f"{split}_binary.tsv"
    rows = iter_tsv(path, (4,), header=["sentence1", "sentence2", "label", "votes"])
    return [ScoredPair(text1=f[0], text2=f[1], score=_binary(path, n, f[2])) for n, f in rows]


def _wikiqa(folder: Path, split: str) -> list[RerankingGroup]:
    path = folder / f"{split}.tsv"
    groups: dict[str, RerankingGroup] = {}
    for n, (qid, question, candidate, label) in iter_tsv(path, (4,), header=["qid", "question", "candidate", "label"]):
        group = groups.setdefault(qid, RerankingGroup(query_id=qid, query=question))
        if group.query != question:
            raise DataFormatError(f"{path}:{n}: qid {qid} has a different question than on its first line")
        (group.positives if _binary(path, n, label) else group.negatives).append(candidate)
    return list(groups.values())


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
