"""LoRA adapters via peft (NV-Embed appendix C: rank 16, alpha 32, dropout 0.1; LGAI uses rank 64).

Only the backbone is wrapped; the pooling head stays a plain module and trains fully. Merging folds the adapters
into the base weights so exported models load without peft.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import torch
from peft import LoraConfig as PeftLoraConfig
from peft import PeftModel, get_peft_model
from transformers import PreTrainedModel

from embedforge.config.model import ALL_LINEAR, LoraConfig
from embedforge.model.backbone import transformer_blocks

log = logging.getLogger(__name__)


def add_lora(backbone: PreTrainedModel, config: LoraConfig) -> PeftModel:
    """Wrap `backbone` with fresh LoRA adapters on `config.target_modules`; base weights are frozen."""
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in backbone.named_modules() if isinstance(m, torch.nn.Linear)})
    targets: str | list[str] = list(config.target_modules)
    if targets == [ALL_LINEAR]:
        # peft takes its shorthand only for every block; with `top_layers` the blocks' linear layers are named
        targets = ALL_LINEAR if config.top_layers is None else linear
    else:
        missing = sorted(set(targets) - set(linear))
        if missing:
            raise ValueError(
                f"model.lora.target_modules {missing} are not linear layers of the backbone (it has {linear})"
            )
    peft_config = PeftLoraConfig(
        r=config.r,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=targets,
        **_top_blocks(backbone, config.top_layers),
        bias="none",
    )
    model = get_peft_model(backbone, peft_config)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info(
        "LoRA r=%d alpha=%g on %s blocks: %.2fM of %.1fM backbone parameters trainable",
        config.r,
        config.alpha,
        "all" if config.top_layers is None else f"the last {config.top_layers}",
        trainable / 1e6,
        total / 1e6,
    )
    return model


def _top_blocks(backbone: PreTrainedModel, top_layers: int | None) -> dict[str, Any]:
    """peft's `layers_to_transform` (the last `top_layers` block indexes) and `layers_pattern` (the name of the
    module list that holds the blocks: `layers` in Llama, `layer` in BERT); nothing when every block is adapted."""
    if top_layers is None:
        return {}
    depth = backbone.config.num_hidden_layers
    if top_layers > depth:
        raise ValueError(f"model.lora.top_layers {top_layers} exceeds the backbone's {depth} transformer blocks")
    name, _ = transformer_blocks(backbone)
    return {
        "layers_to_transform": list(range(depth - top_layers, depth)),
        "layers_pattern": [name.rsplit(".", 1)[-1]],
    }


def is_peft(backbone: object) -> bool:
    return isinstance(backbone, PeftModel)


def merged_copy(backbone: PreTrainedModel | PeftModel) -> PreTrainedModel:
    """A plain transformers model with the adapters folded in; the given model is left untouched."""
    return fold_adapters(copy.deepcopy(backbone)) if is_peft(backbone) else backbone


def fold_adapters(backbone: PreTrainedModel | PeftModel) -> PreTrainedModel:
    """The adapters folded into the base weights in place (NV-Embed App. C's merge), returning the plain model the
    peft wrapper held: no second copy of the weights in memory, which for a 7B backbone is 14.5 GB. The wrapper is
    spent afterwards; a plain model comes back as it is."""
    if not is_peft(backbone):
        return backbone
    return backbone.merge_and_unload()
