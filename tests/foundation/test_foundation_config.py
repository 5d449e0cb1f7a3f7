"""Config validation: the three profiles pass; each bad config fails with a message naming the key and value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from embedforge.config import ConfigError, load_config
from embedforge.config.loader import config_from_dict

REPO = Path(__file__).resolve().parents[2]
PROFILES = sorted((REPO / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", PROFILES, ids=[p.stem for p in PROFILES])
def test_profiles_validate(path):
    config = load_config(path)
    assert config.name == yaml.safe_load(path.read_text())["name"]


def test_three_profiles_exist():
    assert {"tiny", "local", "nv-embed-v2"} <= {p.stem for p in PROFILES}


def _tiny() -> dict[str, Any]:
    return yaml.safe_load((REPO / "configs" / "tiny.yaml").read_text())


def _set(data: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    node: Any = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = value
    return data


# (case, dotted key, bad value, text the message line for that key must contain)
BAD = [
    ("unknown top-level key", "trainer", 3, "unknown key"),
    ("unknown nested key", "model.lora.rank", 8, "unknown key"),
    ("wrong type", "model.max_query_length", "long", "valid integer"),
    ("unknown pooling", "model.pooling", "max", "'max'"),
    ("temperature <= 0", "synth.generator.temperature", 0, "greater than 0"),
    ("negative hard-negative count", "train.stages.0.num_negatives", -1, "greater than or equal to 0"),
    ("negative warm-up", "train.stages.0.warmup_steps", -5, "greater than or equal to 0"),
    ("unknown curriculum", "train.stages.0.curriculum", "hardest-first", "unknown curriculum 'hardest-first'"),
    ("zero learning rate", "train.stages.0.learning_rate", 0.0, "greater than 0"),
    ("min > max replicas", "serve.autoscaling.min_replicas", 3, "min_replicas (3) > max_replicas (1)"),
    ("unknown source kind", "data.sources.0.kind", "s3", "'s3'"),
    ("unknown shared dataset", "data.sources.0.path", "imagenet", "unknown shared dataset 'imagenet'"),
    ("unknown shared split", "data.sources.0.split", "validation", "no split 'validation'"),
    ("zero max_examples", "data.sources.0.max_examples", 0, "greater than 0"),
    ("negative source weight", "data.sources.0.weight", -1.0, "greater than 0"),
    ("negative per-example negatives", "data.sources.0.negatives_per_example", -2, "greater than or equal to 0"),
    ("unknown task type", "data.sources.1.task_type", "translation", "'translation'"),
    ("lora dropout 1", "model.lora.dropout", 1.0, "less than 1"),
    ("negative cpus", "resources.num_cpus", -2, "greater than 0"),
    ("GPUs as a custom resource", "train.resources", {"GPU": 1.0}, "['GPU'] are Ray's own resources"),
    ("zero custom resource", "serve.resources", {"learn_node": 0.0}, "must be > 0: ['learn_node']"),
]


@pytest.mark.parametrize(("case", "key", "value", "expected"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_key_and_value(case, key, value, expected):
    with pytest.raises(ConfigError) as info:
        config_from_dict(_set(_tiny(), key, value), "bad.yaml")
    lines = [line for line in str(info.value).splitlines() if line.strip().startswith(key.split(".")[0])]
    matching = [line for line in lines if expected in line]
    assert matching, f"{case}: no message line names {key} with {expected!r}:\n{info.value}"
    assert any(key in line or key.rsplit(".", 1)[0] in line for line in matching), str(info.value)
    assert any(repr(value) in line or str(value) in line for line in matching), str(info.value)


def test_cross_section_checks_name_the_problem():
    data = _set(_tiny(), "train.num_workers", 3)
    with pytest.raises(
        ConfigError,
        match=r"train.num_workers: 3 workers x 1.0 CPUs need 3.0 CPUs, "
        r"resources.num_cpus is 2",
    ):
        config_from_dict(data)
    data = _tiny()
    data["train"]["stages"][0]["datasets"] = [{"source": "msmarco"}]
    with pytest.raises(ConfigError, match=r"train.stages.0.datasets.0.source: unknown data source 'msmarco'"):
        config_from_dict(data)
    data = _set(_set(_tiny(), "synth.generator.in_process", True), "synth.generator.tensor_parallel_size", 2)
    with pytest.raises(ConfigError, match=r"in_process: true needs tensor_parallel_size 1, got 2"):
        config_from_dict(data)
    data = _set(_set(_tiny(), "synth.generator.cpus_per_engine", 4), "resources.num_cpus", 2)
    with pytest.raises(ConfigError, match=r"synth.generator.cpus_per_engine: one actor asks for 4.0 CPUs, "):
        config_from_dict(data)
    data = _set(_tiny(), "evaluate.cpus_per_worker", 3)
    with pytest.raises(ConfigError, match=r"evaluate.cpus_per_worker: one actor asks for 3.0 CPUs, resources"):
        config_from_dict(data)
    # no actor, no check: a disabled stage, and BM25 (scored in the driver)
    config_from_dict(_set(_set(_tiny(), "evaluate.cpus_per_worker", 3), "evaluate.enabled", False))
    data = _tiny()
    data["mine"]["teachers"].append({"kind": "bm25", "num_cpus": 4})
    config_from_dict(data)
    data["mine"]["teachers"][0]["num_cpus"] = 4
    with pytest.raises(ConfigError, match=r"mine.teachers.0.num_cpus: one actor asks for 4.0 CPUs"):
        config_from_dict(data)
    data = _tiny()
    data["mine"]["sources"] = ["wikiqa", "nq"]
    with pytest.raises(ConfigError, match=r"mine.sources: unknown data source 'nq'"):
        config_from_dict(data)
    data = _tiny()
    data["data"]["sources"].append(dict(data["data"]["sources"][0]))
    with pytest.raises(ConfigError, match=r"duplicate source names \['wikiqa'\]"):
        config_from_dict(data)


def test_a_cropped_source_without_a_path_cuts_from_the_collection_the_teachers_rank():
    data = _tiny()
    data["data"]["sources"].append({"name": "crops", "kind": "cropped"})
    with pytest.raises(ConfigError, match=r"'crops': a cropped source without a path cuts .* mine.corpus"):
        config_from_dict(data)
    data["mine"]["corpus"] = "trec_dl_msmarco_subset/corpus.jsonl"
    sources = {s.name: s for s in config_from_dict(data).data.sources}
    assert sources["crops"].path == "trec_dl_msmarco_subset/corpus.jsonl"
    data["data"]["sources"][-1] = {"name": "crops", "kind": "run"}
    with pytest.raises(ConfigError, match=r"path: a source of kind 'run' needs one"):
        config_from_dict(data)


def test_overrides_and_file_errors(tmp_path):
    config = load_config(REPO / "configs" / "tiny.yaml", ["train.stages.0.steps=9", "data.seed=5"])
    assert (config.train.stages[0].steps, config.data.seed) == (9, 5)
    with pytest.raises(ConfigError, match=r"must look like dotted\.key=value"):
        load_config(REPO / "configs" / "tiny.yaml", ["train.steps"])
    with pytest.raises(ConfigError, match=r"train\.stages has no item '7' \(it has 2\)"):
        load_config(REPO / "configs" / "tiny.yaml", ["train.stages.7.steps=1"])
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(tmp_path / "list.yaml")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "embedforge.cli.main", *args], capture_output=True, text=True, cwd=REPO, timeout=120
    )


def test_config_check_exit_codes(tmp_path):
    good = _cli("config", "check", "configs/tiny.yaml")
    assert good.returncode == 0, good.stderr
    assert "valid (hash" in good.stdout and "backbone: bundled:tiny-llama" in good.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_set(_tiny(), "model.pooling", "max")))
    failed = _cli("config", "check", str(bad))
    assert failed.returncode == 1
    assert "model.pooling" in failed.stderr and "'max'" in failed.stderr
    assert _cli("config", "check", str(tmp_path / "nope.yaml")).returncode == 1


def test_generator_fills_its_engine_unless_told_otherwise():
    """Each engine actor gets `max_num_seqs` prompts per call by default, so a call can fill the running batch."""
    data = _set(_tiny(), "synth.generator.max_num_seqs", 48)
    del data["synth"]["generator"]["batch_size"]  # tiny.yaml sets it
    assert config_from_dict(data).synth.generator.prompts_per_call == 48
    assert config_from_dict(_set(data, "synth.generator.batch_size", 8)).synth.generator.prompts_per_call == 8


def test_keys_at_their_implicit_value_stay_out_of_the_dump_and_any_other_value_is_kept():
    """Keys added after stages were completed (`Section.implicit_values`) leave a config's dump, and so its stage
    hashes, as they were until a config sets them."""
    from embedforge.config.base import Section
    from embedforge.config.evaluate import DeployGuard, EvaluateConfig
    from embedforge.config.mine import MineConfig, SelectionConfig
    from embedforge.config.model import LoraConfig, ModelConfig
    from embedforge.config.train import DistillConfig, GradCacheConfig, InfoNCEConfig, MatryoshkaConfig, TrainConfig

    sections = (
        Section,
        MineConfig,
        SelectionConfig,
        LoraConfig,
        ModelConfig,
        DistillConfig,
        InfoNCEConfig,
        EvaluateConfig,
    )
    assert {cls: cls.implicit_values for cls in sections} == {
        Section: {},
        MineConfig: {"soft_labels_from": None, "fusion": "rrf"},
        SelectionConfig: {"max_positive_rank": None, "keep_untagged_negatives": False},
        LoraConfig: {"top_layers": None},
        ModelConfig: {"frozen_documents": False, "compile": False},
        DistillConfig: {"scores": "mined", "over": "candidates", "positive": "as_scored"},
        InfoNCEConfig: {"symmetric": False},
        EvaluateConfig: {"dimensions": [], "deploy_guard": DeployGuard()},
    }
    assert GradCacheConfig.implicit_values == {"chunk_tokens": None}
    assert TrainConfig.implicit_values == {
        "wise_ft_alpha": 1,
        "freeze_token_embeddings": False,
        "matryoshka": MatryoshkaConfig(),
    }

    dump = load_config(REPO / "configs" / "local.yaml").model_dump(mode="json")
    assert "soft_labels_from" not in dump["mine"] and "wise_ft_alpha" not in dump["train"]
    assert "matryoshka" not in dump["train"] and not {"dimensions", "deploy_guard"} & set(dump["evaluate"])
    assert not {"max_positive_rank", "keep_untagged_negatives"} & set(dump["mine"]["selection"])
    assert "top_layers" not in dump["model"]["lora"] and "lora" in dump["model"]
    assert "frozen_documents" not in dump["model"] and "over" not in dump["train"]["stages"][0]["losses"]["distill"]
    assert "compile" not in dump["model"] and "chunk_tokens" not in dump["train"]["gradcache"]

    changed = load_config(
        REPO / "configs" / "local.yaml",
        ["mine.soft_labels_from=0", "train.wise_ft_alpha=0.5", "model.lora.top_layers=2",
         "mine.selection.keep_untagged_negatives=true"],
    ).model_dump(mode="json")  # fmt: skip
    assert changed["mine"]["soft_labels_from"] == 0 and changed["train"]["wise_ft_alpha"] == 0.5
    assert changed["model"]["lora"]["top_layers"] == 2 and changed["mine"]["selection"]["keep_untagged_negatives"]
    assert DistillConfig(scores="teacher").model_dump()["scores"] == "teacher"
    assert DistillConfig(over="collection").model_dump()["over"] == "collection"
    assert DistillConfig(positive="top").model_dump()["positive"] == "top"
    assert "positive" not in DistillConfig().model_dump()
    assert ModelConfig(frozen_documents=True).model_dump()["frozen_documents"] is True
    assert ModelConfig(compile=True).model_dump()["compile"] is True
    assert "scores" not in DistillConfig().model_dump()
    assert "symmetric" not in InfoNCEConfig().model_dump() and InfoNCEConfig(symmetric=True).model_dump()["symmetric"]
