"""Load a backbone (a decoder LLM of the Llama, Mistral or Qwen2 families, or an encoder such as BERT, XLM-R or
MPNet, bare or inside a sentence-transformers folder) and its tokenizer.

The base transformer is loaded without any head (AutoModel), in the configured dtype, with SDPA attention where the
architecture has it; a decoder is then switched to bidirectional attention when asked (NV-Embed 3.1; see
`bidirectional.py`). Encoders attend both ways by construction.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from embedforge.model.backbone_spec import BackboneSpec, read_backbone_spec
from embedforge.model.bidirectional import set_attention_direction

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_backbone(path: Path | BackboneSpec, dtype: str = "float32", bidirectional: bool = True) -> PreTrainedModel:
    """The base model of `path` (a checkpoint or sentence-transformers folder, or its spec), ready to embed."""
    spec = path if isinstance(path, BackboneSpec) else read_backbone_spec(path)
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    try:
        model = AutoModel.from_pretrained(spec.weights, dtype=DTYPES[dtype], attn_implementation="sdpa")
    except ValueError as err:  # an encoder family without an SDPA implementation
        log.info("%s: no SDPA attention (%s), using eager attention", spec.model_type, err)
        model = AutoModel.from_pretrained(spec.weights, dtype=DTYPES[dtype])
    model.config.use_cache = False
    if spec.is_decoder:
        set_attention_direction(model, bidirectional)
    log.info(
        "loaded %s backbone from %s (%.1fM parameters, %s, %s attention)",
        spec.model_type,
        spec.weights,
        sum(p.numel() for p in model.parameters()) / 1e6,
        dtype,
        "bidirectional" if bidirectional or not spec.is_decoder else "causal",
    )
    return model


def transformer_blocks(backbone: nn.Module) -> tuple[str, nn.ModuleList]:
    """The module list holding a backbone's transformer blocks (`layers` in Llama, `encoder.layer` in BERT; inside
    a peft wrapper too) and its qualified name."""
    depth = backbone.config.num_hidden_layers
    for name, module in backbone.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == depth:
            return name, module
    raise ValueError(f"no list of {depth} transformer blocks found in {type(backbone).__name__}")
