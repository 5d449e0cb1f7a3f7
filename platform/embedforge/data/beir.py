"""Read a BEIR folder: `corpus.jsonl`, `queries.jsonl` and `qrels/<split>.tsv` (header optional)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from embedforge.data.delimited import DataFormatError, read_tsv
from embedforge.data.io import iter_jsonl
from embedforge.data.schema import CorpusDocument, Qrel, Query

QRELS_HEADER = ["query-id", "corpus-id", "score"]


@dataclass
class BeirDataset:
    """A retrieval collection: documents, queries and graded relevance judgements."""

    corpus: list[CorpusDocument]
    queries: list[Query]
    qrels: list[Qrel]
    name: str = ""
    _docs: dict[str, CorpusDocument] = field(default_factory=dict, init=False, repr=False)

    def doc(self, doc_id: str) -> CorpusDocument | None:
        if not self._docs:
            self._docs = {d.doc_id: d for d in self.corpus}
        return self._docs.get(doc_id)


def _field(path: Path, lineno: int, obj: dict, key: str, required: bool = True) -> str:
    value = obj.get(key)
    if value is None:
        if required:
            raise DataFormatError(f"{path}:{lineno}: missing {key!r}")
        return ""
    return str(value)


def read_beir_corpus(path: Path) -> list[CorpusDocument]:
    return [
        CorpusDocument(
            doc_id=_field(path, n, o, "_id"),
            text=_field(path, n, o, "text"),
            title=_field(path, n, o, "title", required=False),
        )
        for n, o in iter_jsonl(path)
    ]


def read_beir_queries(path: Path) -> list[Query]:
    return [Query(query_id=_field(path, n, o, "_id"), text=_field(path, n, o, "text")) for n, o in iter_jsonl(path)]


def read_beir_qrels(path: Path) -> list[Qrel]:
    with path.open(encoding="utf-8") as fh:
        has_header = fh.readline().rstrip("\r\n").split("\t")[:1] == ["query-id"]
    rows = read_tsv(path, (3,), header=QRELS_HEADER if has_header else None)
    return list(map(Qrel, rows.column(0), rows.column(1), rows.floats(2, "relevance")))


def read_beir(folder: str | Path, split: str = "test") -> BeirDataset:
    """Read a BEIR folder; fails naming the missing file when the layout is incomplete."""
    folder = Path(folder)
    needed = [folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a BEIR folder for split {split!r}: missing {missing}")
    return BeirDataset(
        corpus=read_beir_corpus(needed[0]),
        queries=read_beir_queries(needed[1]),
        qrels=read_beir_qrels(needed[2]),
        name=folder.name,
    )
