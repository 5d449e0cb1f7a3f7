"""A plain BERT sentence-transformers folder loaded without transformers (`model/plain_bert.py`) tokenizes and
encodes exactly as sentence-transformers does, in float32 and bf16, and folders it does not reproduce are left to
sentence-transformers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embedforge.model.plain_bert import load_plain_bert
from embedforge.model.unpadded import UnpaddedBert

TEXTS = [
    "short",
    "  leading and trailing spaces  ",
    "",
    "ÜNÏCÖDÉ Text, with punctuation!? and accents: café naïve",
    "汉字 and かな mixed with English",
    "a cat sat on the mat while the dog slept by the door",
    "the longest one: " + "tokens beyond the model's limit are cut, as sentence-transformers cuts them " * 30,
]


def _st(folder: Path, max_length: int, dtype: str = "float32"):
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", model_kwargs={"dtype": getattr(torch, dtype)})
    model.max_seq_length = max_length
    return model


@pytest.mark.parametrize("max_length", [12, 256])
def test_tokens_are_sentence_transformers_own(minilm_dir, max_length):
    import torch

    plain = load_plain_bert(minilm_dir, torch.float32, "cpu", max_length)
    reference = _st(minilm_dir, max_length).preprocess(TEXTS)
    ours = plain.tokenize(TEXTS)
    for key in ("input_ids", "attention_mask", "token_type_ids"):
        assert torch.equal(ours[key], reference[key]), key
    if max_length == 12:  # the longer texts were cut, special tokens included
        assert ours["input_ids"].shape[1] == 12


def test_vectors_are_sentence_transformers_own_in_float32_and_bf16(minilm_dir):
    import torch

    plain = load_plain_bert(minilm_dir, torch.float32, "cpu", 256)
    reference = _st(minilm_dir, 256)
    expected = reference.encode(TEXTS, batch_size=3, normalize_embeddings=True)
    ours = plain.encode(TEXTS, 3)
    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, atol=2e-6)
    assert np.all((ours @ expected.T).argmax(axis=1) == np.arange(len(TEXTS)))

    half = load_plain_bert(minilm_dir, torch.bfloat16, "cpu", 256)
    assert {p.dtype for p in half.bert.parameters()} == {torch.bfloat16}
    st_half = UnpaddedBert.of(_st(minilm_dir, 256, "bfloat16")).encode(TEXTS, 3)
    np.testing.assert_allclose(half.encode(TEXTS, 3), st_half, atol=1e-6)  # the same bf16 computation


def _variant(minilm_dir: Path, tmp_path: Path, edit: dict[str, dict]) -> Path:
    """A copy of the MiniLM folder (weights linked) with JSON files edited: {relative path: keys to set}."""
    folder = tmp_path / "variant"
    for source in minilm_dir.rglob("*"):
        target = folder / source.relative_to(minilm_dir)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif source.suffix != ".json":
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.loads(source.read_text())
            if isinstance(data, dict):
                data |= edit.get(str(source.relative_to(minilm_dir)), {})
            target.write_text(json.dumps(data))
    return folder


def test_cls_pooling_folder_is_encoded_as_sentence_transformers_does(minilm_dir, tmp_path):
    import torch

    pooling = {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    folder = _variant(minilm_dir, tmp_path, {"1_Pooling/config.json": pooling})
    plain = load_plain_bert(folder, torch.float32, "cpu", 256)
    assert plain is not None and plain.pooling == "cls"
    expected = _st(folder, 256).encode(TEXTS, batch_size=4, normalize_embeddings=True)
    np.testing.assert_allclose(plain.encode(TEXTS, 4), expected, atol=2e-6)


@pytest.mark.parametrize(
    "edit",
    [
        {"config.json": {"hidden_act": "gelu_new"}},
        {"config.json": {"position_embedding_type": "relative_key"}},
        {"config.json": {"model_type": "roberta"}},
        {"1_Pooling/config.json": {"pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}},
        {"config_sentence_transformers.json": {"prompts": {"query": "query: "}, "default_prompt_name": "query"}},
    ],
)
def test_folders_it_does_not_reproduce_are_left_to_sentence_transformers(minilm_dir, tmp_path, edit):
    import torch

    assert load_plain_bert(_variant(minilm_dir, tmp_path, edit), torch.float32, "cpu", 256) is None


def test_missing_weights_file_or_tensor(minilm_dir, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    folder = _variant(minilm_dir, tmp_path, {})
    (folder / "model.safetensors").unlink()
    assert load_plain_bert(folder, torch.float32, "cpu", 256) is None  # a .bin-only folder: sentence-transformers
    weights = load_file(str(minilm_dir / "model.safetensors"))
    weights.pop("encoder.layer.3.output.dense.weight")
    save_file(weights, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"BERT weights missing \['encoder.layer.3.output.dense.weight'\]"):
        load_plain_bert(folder, torch.float32, "cpu", 256)


def test_a_teacher_actor_never_imports_transformers(minilm_dir):
    """What the ~320 MiB per teacher actor rests on: encoding with the MiniLM teacher imports neither
    transformers nor sentence-transformers (each pulls in scikit-learn, sympy, torch._dynamo and accelerate)."""
    code = f"""
import sys
from embedforge.config.mine import TeacherConfig
from embedforge.mine.teachers.dense import load_dense_teacher
teacher = load_dense_teacher(TeacherConfig(kind="sentence_transformers", model={str(minilm_dir)!r}))
assert teacher.encode_documents(["Spiders have eight legs."]).shape == (1, 384)
print(sorted(m for m in ("transformers", "sentence_transformers", "sklearn", "sympy") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_folder_without_sentence_transformers_modules_is_not_loaded(tiny_model_dir):
    import torch

    assert load_plain_bert(tiny_model_dir, torch.float32, "cpu", 256) is None  # a bare (Llama) checkpoint
