"""configs/documents.yaml: the documents-in profile trains only on synthetic queries over one shared collection,
mines that whole collection, and validates on the held-out generated queries."""

from __future__ import annotations

from pathlib import Path

from embedforge.config import load_config
from embedforge.data.documents import read_documents
from embedforge.evaluate.registry import HELDOUT_TASK
from embedforge.paths import resolve_data_path

REPO = Path(__file__).resolve().parents[2]


def test_documents_profile_points_at_a_shared_collection(shared_data):
    config = load_config(REPO / "configs" / "documents.yaml")
    path = resolve_data_path(config.synth.documents)
    assert not Path(config.synth.documents).is_absolute(), "relative to the data dir, so it works on any machine"
    assert path.is_relative_to(shared_data) and path.is_file()
    docs = read_documents(path)
    assert len(docs) == 5000 and all(d.text for d in docs[:50])
    assert config.synth.max_documents < len(docs) and 0 < config.synth.heldout_fraction < 1

    assert [s.kind for s in config.data.sources] == ["run"]
    trained_on = {d.source for stage in config.train.stages for d in stage.datasets}
    assert trained_on == {config.data.sources[0].name}
    assert config.mine.corpus == config.synth.documents, "negatives come from the whole collection"
    assert config.synth.writes_queries and config.synth.query_styles == ["question", "keywords"]
    assert HELDOUT_TASK in config.evaluate.tasks


def test_checkpoint_selection_without_a_validation_slice_fails_before_any_work() -> None:
    import pytest

    from embedforge.config import ConfigError

    with pytest.raises(ConfigError, match="select_checkpoint needs a validation slice"):
        load_config(REPO / "configs" / "local.yaml", ["train.select_checkpoint=true"])
