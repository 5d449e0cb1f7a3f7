"""What a backbone folder is: a decoder LLM, an encoder, or an existing embedding model (sentence-transformers).

The embedder starts from any of them with the same config keys. A sentence-transformers folder (all-MiniLM-L6-v2,
e5, bge, gte, e5-mistral) carries its own pooling in `modules.json` / `<pooling>/config.json` and the folder of its
Transformer module; `resolve_model_config` turns `pooling: auto`, `pooled_tokens: auto` and `bidirectional: null`
into the backbone's own,
so an unchanged model encodes as its authors trained it, and fails before any work on combinations the backbone
cannot run (causal attention in an encoder, ATA pooling without decoder layers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from embedforge.config.model import ModelConfig

# decoder families whose attention masks `bidirectional.py` has been verified to switch (transformers.masking_utils)
DECODER_TYPES = frozenset({"llama", "mistral", "qwen2"})
# encoder families whose attention is bidirectional by construction and whose AutoModel returns token states
ENCODER_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "mpnet", "distilbert", "electra", "deberta-v2", "camembert", "modernbert"}
)
ST_POOLING_MODES = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_weightedmean_tokens": "weighted_mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "last",
}
ST_MODE_NAMES = {"mean": "mean", "weightedmean": "weighted_mean", "cls": "cls", "lasttoken": "last"}


@dataclass(frozen=True)
class BackboneSpec:
    """A backbone folder as the embedder sees it: where the HF weights are, its family and its own pooling."""

    weights: Path
    model_type: str
    is_decoder: bool
    pooling: str | None  # the folder's own pooling (sentence-transformers), None for a bare checkpoint
    pools_prompt: bool | None = None  # its Pooling's `include_prompt` (sentence-transformers default: true)
    prompts: dict[str, str] | None = None  # a sentence-transformers folder's own prompts ({} when it has none)
    max_seq_length: int | None = None
    modules: tuple[str, ...] = ()  # a sentence-transformers folder's module classes in order, e.g. ("Transformer", ...)
    default_prompt: str | None = None  # the prompt its encode() applies when given none
    hidden_size: int | None = None  # the width of its hidden states, which every pooling keeps

    def own_prefix(self, side: str, task: str | None) -> str:
        """The folder's own prompt for a side ("" where it has none): queries, and documents of a symmetric task,
        get the query prompt (E5 encodes both sides of STS as queries); older folders name the document prompt
        `passage`."""
        prompts = self.prompts or {}
        if side == "query" or task is not None:
            return prompts.get("query") or ""
        return prompts.get("document") or prompts.get("passage") or ""


def _st_pooling(folder: Path, modules: list[dict]) -> tuple[str | None, bool | None]:
    """The Pooling module's mode and `include_prompt`, or (None, None) when the folder has none."""
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            config = json.loads((folder / module.get("path", "") / "config.json").read_text())
            if "pooling_mode" in config:  # sentence-transformers >= 3 writes the mode by name
                mode = ST_MODE_NAMES.get(str(config["pooling_mode"]))
            else:
                mode = next((name for key, name in ST_POOLING_MODES.items() if config.get(key)), None)
            if mode is None:
                known = ", ".join(ST_MODE_NAMES)
                raise ValueError(f"{folder}: sentence-transformers pooling {config} is not one of {known}")
            return mode, bool(config.get("include_prompt", True))
    return None, None


def read_backbone_spec(path: Path) -> BackboneSpec:
    """Read a HF checkpoint folder or a sentence-transformers folder; fails naming what is missing or unknown."""
    weights, pooling, pools_prompt, prompts, max_seq_length = path, None, None, None, None
    module_types: tuple[str, ...] = ()
    default_prompt = None
    modules_file = path / "modules.json"
    if modules_file.is_file():
        modules = json.loads(modules_file.read_text())
        module_types = tuple(str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules)
        transformer = next((m for m in modules if str(m.get("type", "")).endswith("Transformer")), None)
        if transformer is None:
            raise ValueError(f"{path}: sentence-transformers folder without a Transformer module")
        weights = path / transformer.get("path", "")
        pooling, pools_prompt = _st_pooling(path, modules)
        st_config = read_json_object(path / "config_sentence_transformers.json")
        prompts = st_config.get("prompts") or {}
        default_prompt = st_config.get("default_prompt_name") or None
        # sentence-transformers < 6 writes max_seq_length beside the Transformer; 6 keeps it as the tokenizer's
        # model_max_length (transformers' "no limit" sentinel is a huge number, not a length)
        tokenizer_limit = read_json_object(weights / "tokenizer_config.json").get("model_max_length")
        max_seq_length = read_json_object(weights / "sentence_bert_config.json").get("max_seq_length") or (
            tokenizer_limit if isinstance(tokenizer_limit, int) and tokenizer_limit < 1_000_000 else None
        )
    if not (weights / "config.json").is_file():
        raise FileNotFoundError(f"{weights} is not a Hugging Face checkpoint folder (no config.json)")
    config = read_json_object(weights / "config.json")
    model_type = config.get("model_type")
    if not model_type:
        raise ValueError(f"{weights}/config.json names no model_type")
    if model_type not in DECODER_TYPES | ENCODER_TYPES:
        raise ValueError(
            f"unsupported backbone architecture {model_type!r} at {weights}: decoders {sorted(DECODER_TYPES)} "
            f"(their attention masks are built by transformers.masking_utils) or encoders {sorted(ENCODER_TYPES)}"
        )
    hidden_size = config.get("hidden_size")
    return BackboneSpec(
        weights,
        model_type,
        model_type in DECODER_TYPES,
        pooling,
        pools_prompt,
        prompts,
        max_seq_length,
        module_types,
        default_prompt,
        hidden_size if isinstance(hidden_size, int) else None,
    )


def read_json_object(path: Path) -> dict:
    """A folder's JSON settings file as a dict; {} when the folder has none."""
    return json.loads(path.read_text()) if path.is_file() else {}


def own_model_config(ref: str, spec: BackboneSpec) -> ModelConfig:
    """The model config of an embedding model used as it is: its own pooling, prompts (as fixed prefixes) and
    maximum length, no LoRA; for a bare checkpoint, the defaults."""
    if spec.prompts is None:
        return ModelConfig(backbone=ref)
    query = spec.prompts.get("query", "").replace("{", "{{").replace("}", "}}")  # a literal prefix, not a template
    values: dict = {
        "backbone": ref,
        "instructions": {"query_template": query, "document_prefix": spec.prompts.get("document", "")},
        "lora": {"enabled": False},
    }
    if spec.max_seq_length:
        values |= {"max_query_length": spec.max_seq_length, "max_doc_length": spec.max_seq_length}
    return ModelConfig.model_validate(values)


def resolve_model_config(config: ModelConfig, spec: BackboneSpec) -> ModelConfig:
    """`config` with `auto` values made concrete for this backbone, checked against what it can run."""
    pooling = config.pooling if config.pooling != "auto" else (spec.pooling or "mean")
    own_pooled = spec.pools_prompt if spec.pools_prompt is not None else not spec.is_decoder
    pooled = config.pooled_tokens if config.pooled_tokens != "auto" else ("all" if own_pooled else "text")
    bidirectional = config.bidirectional
    if bidirectional is None:
        bidirectional = not (spec.is_decoder and spec.pooling is not None)  # an embedding model keeps its own
    if not spec.is_decoder:
        if not bidirectional:
            raise ValueError(
                f"model.bidirectional: false needs a decoder backbone; {spec.model_type} is an encoder and always "
                "attends both ways"
            )
        if pooling in ("ata", "last"):
            raise ValueError(
                f"model.pooling {pooling!r} needs a decoder backbone (last token / decoder attention maps); "
                f"{spec.model_type} is an encoder: use auto, mean, cls or latent_attention"
            )
    return config.model_copy(update={"pooling": pooling, "pooled_tokens": pooled, "bidirectional": bidirectional})
