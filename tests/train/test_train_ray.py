"""Ray Train end to end on the tiny model: 2 gloo DDP workers, one really killed mid-run, exact resume, export."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from embedforge.config import config_from_dict
from embedforge.train.batching import StagePlan
from embedforge.train.examples import load_training_examples
from embedforge.train.worker import read_examples

STEPS = (6, 4)


class _Rows:  # what read_examples expects from a Ray Data shard
    def __init__(self, rows):
        self.rows = rows

    def iter_rows(self):
        return iter(self.rows)


def _config(tiny_config):
    data = tiny_config.model_dump(mode="json")
    data["train"].update(
        # half a CPU each: the session's 2-CPU cluster may still hold other tests' actors (a Serve replica, ...)
        num_workers=2,
        cpus_per_worker=0.5,
        checkpoint_every=3,
        max_failures=2,
        log_every=1,
        gradcache={"enabled": True, "chunk_size": 3},
        matryoshka={"dims": [16, 32]},  # what the config turns on reaches the loss of every worker and every step
    )
    data["train"]["stages"][0].update(steps=STEPS[0], curriculum="none")
    data["train"]["stages"][1].update(steps=STEPS[1])
    data["train"]["stages"][1]["losses"] = {"pair_bce": {"weight": 0.5}, "distill": {"weight": 0.0}}
    return config_from_dict(data)


def _metrics(path):
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def read_scalars(folder):
    """TensorBoard's scalars in `folder` as {tag: {step: value}}, as its viewer shows them: event files in the order
    written, a session START at step S (a resumed attempt's `purge_step`) dropping every earlier value at S or later.
    The TFRecord framing (length, its CRC, the record, its CRC) is read directly, each record an Event."""
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    scalars: dict[str, dict[int, float]] = {}
    for path in sorted(folder.glob("events.out.tfevents.*"), key=lambda p: p.name.split(".")[3]):
        data, at = path.read_bytes(), 0
        while at < len(data):
            length = int.from_bytes(data[at : at + 8], "little")
            event = Event.FromString(data[at + 12 : at + 12 + length])
            at += 16 + length
            if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                for values in scalars.values():
                    for step in [s for s in values if s >= event.step]:
                        del values[step]
            for value in event.summary.value:
                scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def test_killed_worker_run_resumes_exactly_and_exports(ray_cluster, tiny_config, tmp_path, monkeypatch):
    import mlflow

    from embedforge.model import load_encoder
    from embedforge.train.run import run_train

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file://{tmp_path / 'mlruns'}")  # the workers get them with their job
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this switch
    config = _config(tiny_config)
    out = tmp_path / "train"
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(manifest=run_train(config, tmp_path)), daemon=True)
    thread.start()
    deadline = time.time() + 400
    while time.time() < deadline and not any(int(r["step"]) >= 4 for r in _metrics(out / "metrics.csv")):
        time.sleep(0.2)
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    victim = attempts[0]["pids"][1]
    killed_after = max(int(r["step"]) for r in _metrics(out / "metrics.csv"))
    assert killed_after < sum(STEPS), "the run finished before a worker could be killed"
    os.kill(victim, signal.SIGKILL)
    thread.join(500)
    assert not thread.is_alive(), "training did not finish after the worker was killed"
    manifest = result["manifest"]
    assert manifest["status"] == "complete" and manifest["counts"]["steps"] == sum(STEPS)
    assert all(b["global"] == b["per_worker"] * manifest["workers"] for b in manifest["batch"].values())

    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert len(attempts) == 2 and victim not in attempts[1]["pids"]
    resumed = attempts[1]["resumed_from"]
    assert resumed >= 3 and resumed % 3 == 0  # a real checkpoint, not a restart from scratch

    rows = _metrics(out / "metrics.csv")
    final = {int(r["step"]): r for r in rows}  # last attempt wins
    assert sorted(final) == list(range(1, sum(STEPS) + 1))
    first = {int(r["step"]): r for r in rows if r["attempt"] == "1"}
    redone = [s for s in first if s > resumed]
    assert redone, "no step after the checkpoint was redone"
    for step in redone:  # same data, same dropout, same weights: the same loss
        assert final[step]["attempt"] == "2"
        assert final[step]["batch_hash"] == first[step]["batch_hash"]
        assert float(final[step]["loss"]) == pytest.approx(float(first[step]["loss"]), rel=1e-4, abs=1e-5)

    # data order: the hashes match the plan computed independently from the same examples
    examples = load_training_examples(config, tmp_path).examples
    grouped = read_examples(_Rows([e.to_row() for rows_ in examples.values() for e in rows_]))
    expected = []
    for stage in config.train.stages:
        plan = StagePlan(grouped, stage, 2, config.train.seed, config.train.in_context)
        for _, _, items in plan.global_batches:
            ids = "|".join(it.example.id for it in items)
            expected.append(hashlib.sha256(ids.encode()).hexdigest()[:12])
    assert [final[s]["batch_hash"] for s in sorted(final)] == expected
    assert [final[s]["stage"] for s in sorted(final)] == ["retrieval"] * STEPS[0] + ["blend"] * STEPS[1]
    assert all(final[s]["loss_pair_bce"] for s in range(STEPS[0] + 1, sum(STEPS) + 1))
    assert all(float(final[s]["loss_matryoshka"]) > 0 for s in final)

    # the same per-step values in TensorBoard's event files (each loss term, lr, gradient norm, tokens/s) and in
    # the MLflow run of the attempt that wrote them
    scalars = read_scalars(out / "tensorboard")
    assert manifest["outputs"]["tensorboard"] == str(out / "tensorboard")
    for name in ("loss", "loss_infonce", "loss_matryoshka", "accuracy", "lr", "grad_norm", "tokens_per_s"):
        logged = scalars[f"train/{name}"]
        assert sorted(logged) == sorted(final), name
        for step, row in final.items():
            assert logged[step] == pytest.approx(float(row[name]), rel=1e-5, abs=1e-7), (name, step)
    assert sorted(scalars["train/loss_pair_bce"]) == list(range(STEPS[0] + 1, sum(STEPS) + 1))
    runs = mlflow.search_runs(experiment_names=["embedforge"], output_format="list")
    assert sorted(r.info.run_name.rsplit("-", 1)[1] for r in runs) == ["attempt1", "attempt2"]
    second = next(r for r in runs if r.info.run_name.endswith("attempt2"))
    assert second.data.params["train.gradcache.chunk_size"] == "3"
    history = {m.step: m.value for m in mlflow.MlflowClient().get_metric_history(second.info.run_id, "loss")}
    assert sorted(history) == list(range(resumed + 1, sum(STEPS) + 1))
    assert all(history[step] == pytest.approx(float(final[step]["loss"]), rel=1e-5) for step in history)

    outputs = manifest["outputs"]
    assert (out / "curves.png").stat().st_size > 10_000
    encoder = load_encoder(outputs["merged"])
    vectors = encoder.encode_queries(["what is the capital of france"], task="Retrieve passages")
    assert vectors.shape == (1, encoder.dimension)
    assert np.linalg.norm(vectors[0]) == pytest.approx(1.0, abs=1e-4)
    assert (out / "export" / "sentence_transformers" / "modules.json").is_file()

    # complete for this config: a fresh driver skips it at once, without importing the training stack
    (tmp_path / "config.json").write_text(config.model_dump_json())
    probe = (
        "import json, sys; from embedforge.config import EmbedforgeConfig; from embedforge.train.run import run_train; "
        f"m = run_train(EmbedforgeConfig.model_validate_json(open({str(tmp_path / 'config.json')!r}).read()), "
        f"{str(tmp_path)!r}); "
        "print(json.dumps([m['finished_at'], [k for k in ('torch', 'transformers', 'peft') if k in sys.modules]]))"
    )
    started = time.time()
    printed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert json.loads(printed.splitlines()[-1]) == [manifest["finished_at"], []] and time.time() - started < 30

    # a run stopped after its last checkpoint (the manifest never said complete) is started again: it resumes
    # from the newest stored checkpoint (Ray Train 2 refuses `resume_from_checkpoint`; the workers find it)
    from embedforge.runs.stage import MANIFEST

    (out / MANIFEST).write_text(json.dumps({**manifest, "status": "running"}))
    rerun = run_train(config, tmp_path)
    assert rerun["status"] == "complete" and rerun["counts"]["steps"] == sum(STEPS)
    attempts = [json.loads(line) for line in (out / "attempts.jsonl").read_text().splitlines()]
    assert len(attempts) == 3 and attempts[2]["resumed_from"] == sum(STEPS)


def test_a_batch_plan_that_cannot_be_filled_fails_before_any_worker_starts(tiny_config, tmp_path, shared_data):
    """6 STS-B examples without mined negatives have 5 other positives for an example's 6 negatives, even in a batch
    of one: the driver's plan check names the example and nothing starts (no stage manifest, no Ray Train
    attempt)."""
    from embedforge.train.run import run_train

    data = tiny_config.model_dump(mode="json")
    for source in data["data"]["sources"]:
        source["max_examples"] = 6
    data["train"]["stages"] = [
        {
            "name": "too-small",
            "datasets": [{"source": "stsb"}],
            "in_batch_negatives": False,
            "steps": 2,
            "batch_size": 4,
            "num_negatives": 6,
            "warmup_steps": 0,
        }
    ]
    config = config_from_dict(data, "test")
    with pytest.raises(ValueError, match=r"cannot find 6 distinct negatives for example .* in 'stsb', even in"):
        run_train(config, tmp_path)
    assert not (tmp_path / "train").exists()
