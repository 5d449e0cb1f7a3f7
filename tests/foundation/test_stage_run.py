"""StageRun: skip when complete for the same config and inputs, resume from shards, redo on a changed config."""

from __future__ import annotations

from embedforge.data.schema import LabelledText
from embedforge.runs.stage import StageRun, read_manifest


def _rows(shard: int) -> list[LabelledText]:
    return [LabelledText(f"text {shard}-{i}", "x") for i in range(3)]


def _run(run_dir, config_hash: str, shards: int, stop_after: int | None = None, inputs=None) -> list[int]:
    """A toy stage writing `shards` shards; returns the shard indices it actually (re)wrote."""
    stage = StageRun(run_dir, "toy", {"shards": shards}, config_hash, inputs=inputs)
    if stage.is_complete():
        return []
    stage.start()
    written = []
    for i in range(shards):
        if i in stage.done_shards():
            continue
        if stop_after is not None and len(written) == stop_after:
            return written  # crash mid-way: no manifest "complete"
        stage.write_shard(i, _rows(i), LabelledText)
        written.append(i)
    stage.complete(counts={"rows": len(stage.read_all(LabelledText))}, drops={"too short": 1})
    return written


def test_skip_resume_and_config_change(tmp_path):
    assert _run(tmp_path, "h1", 4, stop_after=2) == [0, 1]
    assert read_manifest(tmp_path / "toy")["status"] == "running"
    assert _run(tmp_path, "h1", 4) == [2, 3]  # resumes, no shard written twice
    manifest = read_manifest(tmp_path / "toy")
    assert manifest["status"] == "complete" and manifest["counts"] == {"rows": 12}
    assert manifest["drops"] == {"too short": 1} and manifest["shards"] == [0, 1, 2, 3]
    assert {"config", "config_hash", "timings", "package_versions", "git_revision"} <= set(manifest)
    assert "ray" in manifest["package_versions"] and manifest["timings"]["total"] >= 0
    assert _run(tmp_path, "h1", 4) == []  # complete: skipped
    assert _run(tmp_path, "h2", 4) == [0, 1, 2, 3]  # other config: stale shards removed and redone
    stage = StageRun(tmp_path, "toy", {}, "h2")
    assert len(stage.read_all(LabelledText)) == 12


def test_changed_input_invalidates(tmp_path):
    _run(tmp_path / "up", "u1", 1)
    inputs = {"up": tmp_path / "up" / "toy"}
    assert _run(tmp_path / "down", "d1", 1, inputs=inputs) == [0]
    assert _run(tmp_path / "down", "d1", 1, inputs=inputs) == []
    _run(tmp_path / "up", "u2", 1)  # upstream re-ran with another config
    assert not StageRun(tmp_path / "down", "toy", {"shards": 1}, "d1", inputs=inputs).is_complete()
    assert _run(tmp_path / "down", "d1", 1, inputs=inputs) == [0]  # its old shards are stale: redone
