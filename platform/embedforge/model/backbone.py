"""Load a decoder-only backbone (Llama, Mistral, Qwen2 families) and its tokenizer from a HF checkpoint folder.

The base transformer is loaded without its LM head (AutoModel), in the configured dtype, with SDPA attention,
then switched to bidirectional attention when asked (NV-Embed 3.1; see `bidirectional.py`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from embedforge.model.bidirectional import check_supported, set_attention_direction

log = logging.getLogger(__name__)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_tokenizer(path: Path) -> PreTrainedTokenizerBase:
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_backbone(path: Path, dtype: str = "float32", bidirectional: bool = True) -> PreTrainedModel:
    """The base model at `path` (a HF checkpoint folder), ready to embed; fails clearly for unsupported families."""
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} is not a Hugging Face checkpoint folder (no config.json)")
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    config = AutoConfig.from_pretrained(path)
    check_supported(config.model_type)
    model = AutoModel.from_pretrained(path, dtype=DTYPES[dtype], attn_implementation="sdpa")
    model.config.use_cache = False
    set_attention_direction(model, bidirectional)
    log.info(
        "loaded %s backbone from %s (%.1fM parameters, %s, %s attention)",
        config.model_type,
        path,
        sum(p.numel() for p in model.parameters()) / 1e6,
        dtype,
        "bidirectional" if bidirectional else "causal",
    )
    return model
