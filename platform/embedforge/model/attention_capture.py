"""Get the final layer's attention maps for ATA pooling (MGH 2.2) while every other layer keeps fast SDPA.

Fused kernels (SDPA, flash) never materialise attention probabilities, so the last decoder layer alone is switched
to transformers' eager attention: its attention module gets its own copy of the config with
`_attn_implementation = "eager"` (attention modules read the implementation from `self.config` at call time in
transformers 5.x), and a forward hook keeps the probabilities it returns. The mask the model built for SDPA is
boolean (True = may attend) while eager adds its mask to the scores, so a pre-hook turns a boolean mask into the
additive form; `None` means nothing is padded: a bidirectional layer needs no mask, a causal one gets the causal
mask that SDPA would have applied by itself.

Cost: the last layer computes attention with plain matmuls and holds a (batch, heads, L, L) float tensor, i.e.
O(B * H * L^2) extra memory for that layer and a slower last layer; the other layers are unchanged.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

_ATTRIBUTE = "_embedforge_attention_capture"


def _decoder_layers(backbone: nn.Module) -> nn.ModuleList:
    for module in backbone.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, nn.ModuleList) and len(layers) > 0 and hasattr(layers[-1], "self_attn"):
            return layers
    raise ValueError(f"cannot find decoder layers with `self_attn` in {type(backbone).__name__}")


class LastLayerAttention:
    """Attach to a backbone; after each forward, `.weights` holds the last layer's attention (B, H, L, L).

    Use `LastLayerAttention.attach(backbone)`: a backbone that already has a capture (including a deep copy of
    one, e.g. a merged or quantized copy) reuses it instead of stacking a second pair of hooks.
    """

    @classmethod
    def attach(cls, backbone: nn.Module) -> LastLayerAttention:
        attn = _decoder_layers(backbone)[-1].self_attn
        existing = getattr(attn, _ATTRIBUTE, None)
        return existing if isinstance(existing, cls) else cls(attn)

    def __init__(self, attn: nn.Module) -> None:
        setattr(attn, _ATTRIBUTE, self)
        attn.config = copy.copy(attn.config)
        attn.config._attn_implementation = "eager"
        self.weights: torch.Tensor | None = None
        attn.register_forward_pre_hook(self._additive_mask, with_kwargs=True)
        attn.register_forward_hook(self._keep)

    @staticmethod
    def _additive_mask(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        mask = kwargs.get("attention_mask")
        hidden = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
        if mask is None and getattr(module, "is_causal", False):
            # SDPA applies causality itself when nothing is padded (mask None, is_causal); eager only adds its mask,
            # so a causal layer without one would attend to later tokens: give it the causal mask explicitly
            length = hidden.shape[1]
            mask = torch.ones(length, length, dtype=torch.bool, device=hidden.device).tril().view(1, 1, length, length)
        if mask is not None and mask.dtype == torch.bool:
            additive = torch.zeros(mask.shape, dtype=hidden.dtype, device=mask.device)
            kwargs["attention_mask"] = additive.masked_fill(~mask, torch.finfo(hidden.dtype).min)
        return args, kwargs

    def _keep(self, module: nn.Module, args: tuple, output: tuple) -> None:
        self.weights = output[1]

    def pop(self) -> torch.Tensor:
        """The weights of the latest forward (cleared so a stale map is never reused)."""
        if self.weights is None:
            raise RuntimeError("no attention weights were captured in the last forward pass")
        weights, self.weights = self.weights, None
        return weights
