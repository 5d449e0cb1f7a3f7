"""The pipeline runner's order, skip detection, failure record and pipeline.json, with small real stages.

The stages here are real StageRun stages (manifest, shards, skip-if-complete) that do trivial work, so the
orchestration is tested in seconds; the end-to-end test runs the real stages.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from embedforge.config import EmbedforgeConfig, config_hash
from embedforge.data.schema import TrainingExample
from embedforge.evaluate.models import model_settings
from embedforge.pipeline import PipelineError, run_pipeline
from embedforge.pipeline.runner import read_pipeline
from embedforge.pipeline.steps import (
    STEP_NAMES,
    StageNotBuiltError,
    Step,
    comparison_models,
    default_steps,
    entry_point,
    served_model,
    starting_model,
)
from embedforge.runs.stage import StageRun

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(tiny_config) -> EmbedforgeConfig:
    tiny_config.name = "pipeline-test"
    return tiny_config


def _stage(name: str, upstream: str | None, calls: list[str]):
    """A real stage: skips when complete for this config, else writes one shard and a complete manifest."""

    def run(config, run_dir: Path) -> dict:
        inputs = {upstream: run_dir / upstream} if upstream else {}
        stage = StageRun(run_dir, name, {"name": config.name}, config_hash(config), inputs)
        if stage.is_complete():
            return json.loads((stage.dir / "manifest.json").read_text())
        calls.append(name)
        stage.start()
        example = TrainingExample(
            id=f"{name}-0", task_name="wikiqa", task_type="retrieval", instruction="i", query="q", positive="p"
        )
        stage.write_shard(0, [example], TrainingExample)
        return stage.complete(counts={"examples": 1})

    return run


def _steps(calls: list[str], fail: str | None = None) -> list[Step]:
    def boom(config, run_dir):
        raise ValueError("the teacher model is unreadable")

    names = ["synth", "mine", "train"]
    steps = [
        Step(n, f"{n} step", lambda c: True, _stage(n, names[i - 1] if i else None, calls)) for i, n in enumerate(names)
    ]
    steps.append(Step("evaluate", "disabled here", lambda c: False, boom))
    if fail:
        steps.insert(names.index(fail), Step(fail, "fails", lambda c: True, boom))
        steps = [s for s in steps if not (s.name == fail and s.run is not boom)]
    return steps


def test_runs_in_order_then_skips_complete_stages(ray_cluster, config, tmp_path):
    calls: list[str] = []
    record = run_pipeline(config, tmp_path, steps=_steps(calls), config_source="configs/tiny.yaml")
    assert calls == ["synth", "mine", "train"]
    assert record["status"] == "complete"
    on_disk = read_pipeline(tmp_path)
    assert on_disk["steps"]["mine"]["status"] == "complete"
    assert on_disk["steps"]["mine"]["stage"]["counts"] == {"examples": 1}
    assert on_disk["steps"]["evaluate"] == {"status": "disabled"}
    assert on_disk["config_hash"] == config_hash(config)

    calls.clear()
    again = run_pipeline(config, tmp_path, steps=_steps(calls))
    assert calls == []
    assert {again["steps"][n]["status"] for n in ("synth", "mine", "train")} == {"skipped (already complete)"}


def test_changed_config_reruns_the_stages(ray_cluster, config, tmp_path):
    calls: list[str] = []
    run_pipeline(config, tmp_path, steps=_steps(calls))
    calls.clear()
    config.name = "pipeline-test-changed"
    run_pipeline(config, tmp_path, steps=_steps(calls))
    assert calls == ["synth", "mine", "train"]


def test_failure_names_the_step_and_stops(ray_cluster, config, tmp_path):
    calls: list[str] = []
    with pytest.raises(PipelineError, match="'mine' failed: the teacher model is unreadable"):
        run_pipeline(config, tmp_path, steps=_steps(calls, fail="mine"))
    assert calls == ["synth"]
    record = read_pipeline(tmp_path)
    assert record["status"] == "failed"
    assert record["failed_step"] == "mine"
    assert "unreadable" in record["steps"]["mine"]["error"]
    assert record["steps"]["train"] == {"status": "pending"}


def test_skip_by_request_and_unknown_skip(ray_cluster, config, tmp_path):
    calls: list[str] = []
    record = run_pipeline(config, tmp_path, steps=_steps(calls), skip=["train"])
    assert calls == ["synth", "mine"]
    assert record["steps"]["train"] == {"status": "skipped by request"}
    with pytest.raises(ValueError, match=r"unknown step\(s\) to skip \['serve'\]"):
        run_pipeline(config, tmp_path, steps=_steps(calls), skip=["serve"])


def test_default_steps_follow_the_contract_order():
    assert STEP_NAMES == ("synth", "mine", "train", "evaluate", "export", "deploy")
    assert [s.name for s in default_steps()] == list(STEP_NAMES)


def test_missing_stage_is_named():
    with pytest.raises(StageNotBuiltError, match=r"embedforge\.nosuchstage\.run does not exist"):
        entry_point("embedforge.nosuchstage.run", "run_nosuchstage")
    with pytest.raises(StageNotBuiltError, match="has no function 'run_nothing'"):
        entry_point("embedforge.pipeline.steps", "run_nothing")


def test_models_compared_and_served(config, tmp_path, tiny_model_dir):
    config.evaluate.baselines = ["bundled:all-minilm-l6-v2", "bundled:smollm2-135m-instruct"]
    assert comparison_models(config) == [
        "trained",
        "bundled:tiny-llama?bidirectional=false",  # the tiny profile trains its decoder bidirectionally
        "bundled:all-minilm-l6-v2",
        "bundled:smollm2-135m-instruct",
    ]
    assert served_model(config, tmp_path) == str(tmp_path / "train" / "export" / "merged")
    config.serve.model = "bundled:all-minilm-l6-v2"
    assert served_model(config, tmp_path) == "bundled:all-minilm-l6-v2"


def test_the_starting_model_is_the_backbone_as_its_user_has_it(config, tiny_model_dir, tiny_bert_dir, minilm_dir):
    """An untrained decoder is compared with the causal attention it was pretrained with, whether the config asks
    for bidirectional attention or a bare decoder gets it by default; encoders and causal runs are unchanged."""
    for bidirectional in (True, None):
        config.model.bidirectional = bidirectional
        assert starting_model(config) == "bundled:tiny-llama?bidirectional=false"
    config.model.bidirectional = False
    assert starting_model(config) == "bundled:tiny-llama"
    for backbone in ("bundled:tiny-bert", "bundled:all-minilm-l6-v2"):
        config.model.backbone, config.model.bidirectional = backbone, None
        assert starting_model(config) == backbone
    for unread in ("s3://models/some-decoder", "/only/on/the/workers/some-decoder"):
        config.model.backbone, config.model.bidirectional = unread, True
        assert starting_model(config) == f"{unread}?bidirectional=false"
        config.model.bidirectional = None
        assert starting_model(config) == unread


def test_the_starting_model_is_served_as_evaluation_scored_it(config, tiny_model_dir):
    base, settings = model_settings(starting_model(config), config.model)
    assert base == "bundled:tiny-llama" and settings.bidirectional is False
    assert settings.model_dump(exclude={"bidirectional"}) == config.model.model_dump(exclude={"bidirectional"})


def test_export_step_requires_both_exports(config, tmp_path):
    export = next(s for s in default_steps() if s.name == "export")
    (tmp_path / "train" / "export" / "merged").mkdir(parents=True)
    (tmp_path / "train" / "export" / "merged" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="export 'sentence_transformers' missing or empty"):
        export.run(config, tmp_path)
    (tmp_path / "train" / "export" / "sentence_transformers").mkdir()
    (tmp_path / "train" / "export" / "sentence_transformers" / "modules.json").write_text("[]")
    found = export.run(config, tmp_path)["exports"]
    assert found["merged"]["files"] == 1 and found["sentence_transformers"]["bytes"] == 2


def test_cli_rejects_bad_input(tmp_path):
    cli = [sys.executable, "-m", "embedforge.cli.main", "run", "configs/tiny.yaml", "--run-dir", str(tmp_path)]
    out = subprocess.run([*cli, "--set", "train.num_workers=0"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert "train.num_workers" in out.stderr and "(got 0)" in out.stderr
    assert not (tmp_path / "pipeline.json").exists(), "nothing runs before the config is valid"
    out = subprocess.run([*cli, "--skip", "serve"], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 2
    assert "invalid choice: 'serve'" in out.stderr


def test_demo_prepares_the_bundled_models_a_config_names():
    from embedforge.config import load_config
    from embedforge.pipeline.demo import bundled_models

    local = load_config(REPO / "configs" / "local.yaml")
    assert bundled_models(local) == ["all-minilm-l6-v2", "smollm2-135m-instruct"]
