"""A full evaluation of the tiny model through `run_evaluate` on a private Ray cluster, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from embedforge.cluster.device import read_usage
from embedforge.config.evaluate import TRAINED, CustomTask
from embedforge.evaluate.run import model_references, run_evaluate, usage_dir
from embedforge.evaluate.tasks import FAMILIES
from embedforge.model.persistence import save_embedder
from embedforge.runs.stage import StageRun

BASELINE = "bundled:tiny-llama?pooling=last"


@pytest.fixture
def eval_config(tiny_config, tmp_path):
    pairs = tmp_path / "my_pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps({"text1": f"the {w} is here", "text2": f"a {w} is there", "score": i % 2}) + "\n"
            for i, w in enumerate(["cat", "dog", "car", "tree", "house", "lamp", "road", "bird"])
        )
    )
    evaluate = tiny_config.evaluate.model_copy(
        update={
            "baselines": [BASELINE],
            "baseline_for_deltas": BASELINE,
            "cache_dir": str(tmp_path / "cache"),
            "custom_tasks": [
                CustomTask(
                    name="my_pairs", family="pair_classification", path=str(pairs), instruction="Are these the same?"
                )
            ],
            "tasks": [*tiny_config.evaluate.tasks, "my_pairs"],
        }
    )
    return tiny_config.model_copy(update={"evaluate": evaluate})


def _save_trained_model(run_dir, perturb: float = 0.0):
    """What the train stage leaves: a saved embedforge model under train/model and a complete manifest."""
    import torch

    from embedforge.model import load_embedder

    embedder = load_embedder("bundled:tiny-llama")
    if perturb:
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for param in embedder.backbone.parameters():
                param.add_(perturb * torch.randn(param.shape, generator=generator))
    save_embedder(embedder, run_dir / "train" / "model")
    StageRun(run_dir, "train", {}, "test").complete()


@pytest.mark.slow
def test_full_evaluation_of_the_tiny_model(ray_cluster, tiny_model_dir, shared_data, eval_config, tmp_path, capsys):
    run_dir = tmp_path / "run"
    _save_trained_model(run_dir)
    assert model_references(eval_config, run_dir, None) == {
        TRAINED: str(run_dir / "train" / "model"),
        BASELINE: BASELINE,
    }
    manifest = run_evaluate(eval_config, run_dir)
    assert manifest["status"] == "complete" and manifest["counts"] == {"models": 2, "tasks": 7}
    printed = capsys.readouterr().out
    assert "# Evaluation report" in printed and "## Deltas vs `bundled:tiny-llama?pooling=last`" in printed

    report = json.loads((run_dir / "evaluate" / "report.json").read_text())
    assert set(report["families"]) == set(FAMILIES)
    assert set(report["tasks"]) == {*eval_config.evaluate.tasks}
    for task, info in report["tasks"].items():
        assert set(info["scores"]) == {TRAINED, BASELINE}, task
        assert all(-1 <= s <= 1 for s in info["scores"].values()), task
    assert report["details"][TRAINED]["my_pairs"]["size"] == 8
    assert report["details"][TRAINED]["trec_dl_msmarco_subset"]["metrics"]["num_queries"] == 6
    assert sorted(report["borda"].values()) and sum(report["borda"].values()) == len(report["tasks"])
    assert set(report["deltas"]) == {TRAINED}
    assert (run_dir / "evaluate" / "report.png").stat().st_size > 10_000
    assert (run_dir / "evaluate" / "report.md").read_text().startswith("# Evaluation report")
    # one actor scored both models, one after the other: the stage starts its worker process once, not per model
    workers = {
        name: {r["worker"] for r in read_usage(usage_dir(run_dir / "evaluate", name))} for name in report["usage"]
    }
    assert len(workers[TRAINED]) == 1 and workers[TRAINED] == workers[BASELINE], workers

    # complete for this config and these inputs: the second call skips and returns the same manifest
    again = run_evaluate(eval_config, run_dir)
    assert again["finished_at"] == manifest["finished_at"]

    # retrained at the same path: every task of the trained model is scored again, none reused
    _save_trained_model(run_dir, perturb=0.5)
    rescored = run_evaluate(eval_config, run_dir)
    assert rescored["finished_at"] != manifest["finished_at"]
    assert rescored["scores"] != manifest["scores"]
    assert all(rescored["scores"][t][BASELINE] == manifest["scores"][t][BASELINE] for t in manifest["scores"])


def test_nothing_to_evaluate_and_unknown_baseline_fail_clearly(tiny_config, tmp_path):
    with pytest.raises(ValueError, match="nothing to evaluate"):
        run_evaluate(tiny_config, tmp_path)
    with pytest.raises(FileNotFoundError, match="model 'trained': no trained model"):
        model_references(tiny_config, tmp_path, [TRAINED])
    config = tiny_config.model_copy(
        update={
            "evaluate": tiny_config.evaluate.model_copy(
                update={"baselines": ["bundled:tiny-llama"], "baseline_for_deltas": "bundled:tiny-llama"}
            )
        }
    )
    with pytest.raises(ValueError, match="baseline_for_deltas 'bundled:tiny-llama' is not among"):
        run_evaluate(config, tmp_path, models=["bundled:tiny-llama?pooling=last"])


def test_cli_reports_config_errors(tmp_path, capsys):
    from embedforge.cli.main import main

    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    assert main(["eval", str(tiny), "--run-dir", str(tmp_path / "run"), "--set", "evaluate.tasks=[]"]) == 1
    assert "evaluate.tasks is empty" in capsys.readouterr().err


def test_a_users_mistake_on_the_cli_prints_one_error_line_and_exits_2(tmp_path):
    """`embedforge eval configs/tiny.yaml --run-dir EMPTY` in a plain shell: no traceback, one `error:` line."""
    import subprocess
    import sys

    tiny = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
    cmd = [sys.executable, "-m", "embedforge.cli.main", "eval", str(tiny), "--run-dir", str(tmp_path / "empty"),
           "--set", "evaluate.baselines=[]"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: nothing to evaluate: no trained model at run_dir/train/model and no evaluate.baselines"]


@pytest.mark.slow
def test_models_are_also_scored_cut_to_each_size_from_the_vectors_of_the_full_one(
    ray_cluster, tiny_model_dir, shared_data, tiny_config, tmp_path
):
    """`evaluate.dimensions`: MODEL@SIZE scores the model's first SIZE coordinates, renormalised, as serving cuts a
    request's `dimensions`; the cut sizes read the full size's cached vectors instead of encoding again."""
    run_dir = tmp_path / "run"
    _save_trained_model(run_dir)
    evaluate = tiny_config.evaluate.model_copy(
        update={"tasks": ["stsb", "mrpc"], "dimensions": [8, 32], "cache_dir": str(tmp_path / "cache")}
    )
    config = tiny_config.model_copy(update={"evaluate": evaluate})
    manifest = run_evaluate(config, run_dir)
    assert manifest["counts"] == {"models": 3, "tasks": 2}
    report = json.loads((run_dir / "evaluate" / "report.json").read_text())
    for task, info in report["tasks"].items():
        assert set(info["scores"]) == {TRAINED, f"{TRAINED}@8", f"{TRAINED}@32"}, task
    assert any(info["scores"][f"{TRAINED}@8"] != info["scores"][TRAINED] for info in report["tasks"].values())
    for task in report["tasks"]:
        assert report["details"][TRAINED][task]["texts"]["encoded"] > 0
        for cut in (f"{TRAINED}@8", f"{TRAINED}@32"):
            texts = report["details"][cut][task]["texts"]
            assert texts["encoded"] == 0 and texts["from_cache"] > 0, (cut, task)

    too_wide = config.model_copy(update={"evaluate": evaluate.model_copy(update={"dimensions": [64]})})
    with pytest.raises(ValueError, match="64 dimensions is not a size its 64-dimensional vectors can be cut to"):
        run_evaluate(too_wide, run_dir)
