"""Checkpoint files round-trip the trainable state; the newest complete checkpoint of a config is found;
metrics rows keep the last attempt of each step, are drawn as a PNG and time the training across attempts."""

from __future__ import annotations

import pytest
import torch

from embedforge.train.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_optimizer,
    load_weights,
    read_state,
    save_checkpoint,
)
from embedforge.train.metrics import append_row, plot_curves, read_rows, training_seconds
from embedforge.train.schedule import make_optimizer, make_scheduler


def _model_and_optim(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[0].requires_grad_(False)  # frozen "base": not part of the checkpoint
    opt = make_optimizer(model.parameters(), 1e-2, 0.0)
    return model, opt, make_scheduler(opt, 1, 10)


def test_checkpoint_round_trip_and_latest(tmp_path):
    model, opt, sched = _model_and_optim(0)
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    sched.step()
    storage = tmp_path / "ray" / "run"
    for step in (2, 4):
        save_checkpoint(
            storage / f"checkpoint-step{step:06d}", model, opt, sched, TrainState(step, 0, step, "mgh", 4, "hashA")
        )
    save_checkpoint(storage / "checkpoint-step000009", model, opt, sched, TrainState(9, 1, 1, "none", None, "hashB"))
    (storage / "checkpoint-step000006").mkdir()  # an upload cut short: no files
    (storage / "checkpoint-step000006" / "state.json").write_text('{"global_step": 6}')

    found = latest_checkpoint(tmp_path / "ray", "hashA")
    assert found is not None and found.name == "checkpoint-step000004"
    assert latest_checkpoint(tmp_path / "ray", "other") is None
    assert read_state(found) == TrainState(4, 0, 4, "mgh", 4, "hashA")

    fresh, fresh_opt, fresh_sched = _model_and_optim(1)
    assert not torch.equal(fresh[1].weight, model[1].weight)
    load_weights(found, fresh)
    load_optimizer(found, fresh_opt, fresh_sched)
    assert torch.equal(fresh[1].weight, model[1].weight)
    assert not torch.equal(fresh[0].weight, model[0].weight)  # frozen weights are not restored
    assert fresh_sched.last_epoch == sched.last_epoch == 1
    assert fresh_opt.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]

    bigger = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1), torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="lacks 4 trainable tensors"):
        load_weights(found, bigger)


def test_metrics_keep_last_attempt_and_plot(tmp_path):
    csv_path = tmp_path / "metrics.csv"
    for attempt, steps in ((1, (1, 2, 3)), (2, (3, 4))):
        for step in steps:
            append_row(
                csv_path,
                {
                    "step": step,
                    "stage": "a" if step < 4 else "b",
                    "attempt": attempt,
                    "loss": 1.0 / step + attempt,
                    "lr": 0.1,
                    "accuracy": 0.5,
                },
            )
    rows = read_rows(csv_path)
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4]
    assert rows[2]["attempt"] == "2"
    png = plot_curves(csv_path, tmp_path / "curves.png")
    assert png is not None and png.stat().st_size > 5_000
    assert plot_curves(tmp_path / "missing.csv", tmp_path / "none.png") is None


def test_training_seconds_sum_the_attempts_without_the_gap_between_them(tmp_path):
    csv_path = tmp_path / "metrics.csv"
    # attempt 1 trains steps 1-3 (2 s each) and dies; attempt 2 starts 1000 s later, redoes step 3, trains step 4
    for attempt, step, end in ((1, 1, 102.0), (1, 2, 104.0), (1, 3, 106.0), (2, 3, 1108.0), (2, 4, 1110.0)):
        append_row(csv_path, {"step": step, "attempt": attempt, "step_s": 2.0, "time": end})
    assert training_seconds(read_rows(csv_path)) == pytest.approx(4.0 + 4.0)
    assert training_seconds([]) == 0.0


def test_checkpoints_resume_only_over_the_upstream_outputs_they_trained_on(tmp_path):
    """The same train settings over another mining run's examples (other teachers, other soft labels) get another
    checkpoint key, so a re-run starts over instead of resuming or selecting the earlier run's checkpoints."""
    from embedforge.train.run import checkpoint_key

    first = checkpoint_key("settings", {"mine": "abc@1.0"})
    assert first == checkpoint_key("settings", {"mine": "abc@1.0"})
    assert first != checkpoint_key("settings", {"mine": "abc@2.0"})  # mining finished again: other examples
    assert first != checkpoint_key("other", {"mine": "abc@1.0"})
    assert checkpoint_key("settings", {}) == "settings"  # trained on shared data only
    model, opt, sched = _model_and_optim(0)
    storage = tmp_path / "ray" / "run"
    save_checkpoint(storage / "checkpoint-step000030", model, opt, sched, TrainState(30, 0, 30, "none", None, first))
    assert latest_checkpoint(tmp_path / "ray", first) is not None
    assert latest_checkpoint(tmp_path / "ray", checkpoint_key("settings", {"mine": "abc@2.0"})) is None
