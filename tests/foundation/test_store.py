"""Run dirs, data and models in object storage (runs/store.py) against a real S3 server (moto, on 127.0.0.1)."""

from __future__ import annotations

import json
import os
import time

import pytest

from embedforge.cluster.device import record_usage
from embedforge.data.documents import read_documents
from embedforge.models.bundled import resolve_model
from embedforge.paths import resolve_data_path
from embedforge.runs.stage import StageRun
from embedforge.runs.store import RunStore, is_remote, mirror_of, staged, store_of


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_what_counts_as_a_store():
    assert is_remote("s3://bucket/run") and is_remote("gs://bucket/run")
    assert not is_remote("/tmp/run") and not is_remote("runs/x") and not is_remote("http://host/v1/embeddings")


def test_push_then_pull_copies_only_what_changed(s3_bucket, tmp_path):
    src = tmp_path / "src"
    (src / "synth" / "data").mkdir(parents=True)
    (src / "synth" / "data" / "part-00000.parquet").write_bytes(b"x" * 1000)
    (src / "synth" / "manifest.json").write_text('{"status": "complete"}')
    store = RunStore(f"{s3_bucket}/run")
    assert store.push(src) == (2, 0)
    assert store.push(src) == (0, 0)  # nothing changed

    dst = tmp_path / "dst"
    assert store.pull(dst) == 2
    assert _tree(dst) == _tree(src)
    assert store.pull(dst) == 0
    assert store.push(dst) == (0, 0)  # pulled files take the store's times: not pushed back

    time.sleep(1.1)
    (src / "synth" / "manifest.json").write_text('{"status": "running"}')
    assert store.push(src) == (1, 0)
    assert store.pull(dst) == 1
    assert json.loads((dst / "synth" / "manifest.json").read_text()) == {"status": "running"}


def test_push_deletes_what_the_stage_removed_and_keeps_what_others_wrote(s3_bucket, tmp_path):
    local = tmp_path / "mirror"
    (local / "mine" / "data").mkdir(parents=True)
    for i in range(3):
        (local / "mine" / "data" / f"part-{i:05d}.parquet").write_bytes(b"shard")
    store = RunStore(f"{s3_bucket}/run")
    store.push(local)
    present = set(store.files())
    (local / "mine" / "data" / "part-00002.parquet").unlink()  # a stale shard the stage removed
    other = tmp_path / "other"
    (other / "train" / "ray").mkdir(parents=True)
    (other / "train" / "ray" / "state.json").write_text("{}")
    store.push(other)  # e.g. Ray Train writing checkpoints straight to the store
    assert store.push(local, deletable=present) == (0, 1)
    assert sorted(store.files()) == [
        "mine/data/part-00000.parquet",
        "mine/data/part-00001.parquet",
        "train/ray/state.json",
    ]
    # an exact pull makes a local folder the store's copy, extra local files removed
    (local / "train" / "ray").mkdir(parents=True)
    (local / "train" / "ray" / "stale.json").write_text("{}")
    store.pull(local / "train" / "ray", "train/ray", exact=True)
    assert sorted(p.name for p in (local / "train" / "ray").iterdir()) == ["state.json"]


def test_staged_run_dir_pulls_first_and_pushes_even_when_the_stage_fails(s3_bucket, tmp_path):
    uri = f"{s3_bucket}/runs/one"
    with staged(uri) as local:
        assert local == mirror_of(uri) and store_of(local).uri == uri
        (local / "synth").mkdir()
        (local / "synth" / "manifest.json").write_text('{"status": "running"}')
    with pytest.raises(RuntimeError, match="stage broke"), staged(uri) as local:
        (local / "synth" / "part.txt").write_text("half")
        raise RuntimeError("stage broke")
    assert sorted(RunStore(uri).files()) == ["synth/manifest.json", "synth/part.txt"]

    # published teacher vectors stay in the store: no mirror pulls them, and no push deletes them
    RunStore(uri).write_bytes("embeddings/ns/shard.keys.npy", b"keys")
    with staged(uri) as local:
        assert not (local / "embeddings").exists()
    assert "embeddings/ns/shard.keys.npy" in RunStore(uri).files()

    # another node (its own scratch) sees the run from the store alone
    os.environ["EMBEDFORGE_SCRATCH"] = str(tmp_path / "node-b")
    with staged(uri) as elsewhere:
        assert elsewhere.is_relative_to(tmp_path / "node-b")
        assert (elsewhere / "synth" / "part.txt").read_text() == "half"

    plain = tmp_path / "plain-run"
    with staged(str(plain)) as local:
        assert local == plain.resolve() and store_of(local) is None


def test_data_files_and_model_folders_are_read_from_the_store(s3_bucket, tmp_path, tiny_model_dir):
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"_id": "a", "text": "alpha"}\n{"_id": "b", "text": "beta"}\n')
    store = RunStore(s3_bucket)
    store.put(docs, "data/docs.jsonl")
    store.push(tiny_model_dir, "models/tiny")

    local_docs = resolve_data_path(f"{s3_bucket}/data/docs.jsonl")
    assert local_docs.suffix == ".jsonl" and not is_remote(local_docs)
    assert [d.doc_id for d in read_documents(local_docs)] == ["a", "b"]

    model = resolve_model(f"{s3_bucket}/models/tiny")
    assert model.is_dir() and _tree(model) == _tree(tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="nothing there"):
        resolve_model(f"{s3_bucket}/models/missing")


def test_workers_record_usage_in_the_store_and_the_stage_collects_it(s3_bucket):
    with staged(f"{s3_bucket}/run") as local:
        stage = StageRun(local, "mine", {"k": 1}, "hash")
        stage.start()
        location = stage.usage_location()
        assert location == f"{s3_bucket}/run/mine/usage"
        record_usage(location, "cpu", "float32")  # what an actor on any node does
        assert not stage.usage_dir.exists() or not list(stage.usage_dir.iterdir())
        manifest = stage.complete()
    assert manifest["usage"]["workers"] == 1 and manifest["usage"]["device"] == "cpu"
    assert any(name.startswith("mine/usage/") for name in RunStore(f"{s3_bucket}/run").files())
