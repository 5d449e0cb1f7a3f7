"""Checkpoint selection scores the validation slice as the deploy guard will: over the whole collection when the
documents are frozen (their vectors are mining's, read from the cache), over a 2,000-document proxy otherwise."""

from __future__ import annotations

from pathlib import Path

from embedforge.config import load_config
from embedforge.data.schema import CorpusDocument, Query
from embedforge.evaluate.registry import HELDOUT_TASK, build_task, heldout_dir
from embedforge.evaluate.run import limited_task
from embedforge.synth.heldout import write_beir
from embedforge.train.selection import SELECTION_CORPUS, selection_task

REPO = Path(__file__).resolve().parents[2]


def _slice(run_dir: Path, documents: int) -> None:
    corpus = [CorpusDocument(doc_id=f"d{i}", text=f"passage {i}") for i in range(documents)]
    queries = [Query(query_id=f"q{i}", text=f"query {i}") for i in (3, 2400)]
    write_beir(heldout_dir(run_dir), corpus, queries, {"q3": "d3", "q2400": "d2400"})


def test_frozen_documents_select_on_the_slice_the_deploy_guard_scores(tmp_path):
    _slice(tmp_path, 2500)
    config = load_config(REPO / "configs" / "documents.yaml")  # frozen documents, every query and document
    guard = limited_task(build_task(HELDOUT_TASK, config.evaluate, tmp_path), config)
    selected = selection_task(config, tmp_path)
    assert len(selected.corpus) == len(guard.corpus) == 2500
    assert selected.queries == guard.queries and selected.qrels == guard.qrels

    limited = load_config(REPO / "configs" / "documents.yaml", ["evaluate.max_corpus_documents=100"])
    assert len(selection_task(limited, tmp_path).corpus) == 100  # evaluation's own limits, whatever they are


def test_a_model_encoding_its_own_documents_selects_on_the_proxy(tmp_path):
    _slice(tmp_path, 2500)
    config = load_config(REPO / "configs" / "tiny.yaml")  # documents trained, encoded again per checkpoint
    assert not config.model.frozen_documents
    selected = selection_task(config, tmp_path)
    ids = {d.doc_id for d in selected.corpus}
    assert len(ids) == SELECTION_CORPUS and {"d3", "d2400"} <= ids  # the judged documents always stay
