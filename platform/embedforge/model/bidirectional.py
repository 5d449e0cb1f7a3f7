"""Switch a loaded decoder-only model between causal and bidirectional attention (NV-Embed 3.1).

NV-Embed removes the causal mask during contrastive training and at inference so every token sees the whole text.
We patch the LOADED model instead of copying transformers' attention code (the LLM2Vec approach that pinned it to
transformers 4.43-4.44). Why this works in transformers 5.x (checked against 5.19):

1. `LlamaModel.forward` / `MistralModel.forward` / `Qwen2Model.forward` build their mask with
   `masking_utils.create_causal_mask` (or `create_sliding_window_causal_mask`). Both start with
   `if not getattr(config, "is_causal", True): return create_bidirectional_mask(...)` (resp. the bidirectional
   sliding-window mask). Setting `config.is_causal = False` therefore yields a padding-only mask.
2. When nothing is padded (always the case at batch size 1), the bidirectional mask is skipped (`None`) so that
   SDPA can use its fast kernels. The SDPA and flash-attention integrations then fall back to the attention
   module's own `is_causal` attribute (`LlamaAttention.is_causal = True`) and would silently apply a causal mask:
   the batch-size-1 bug that llm2vec issue 74 reports. So we also set `is_causal = False` on every attention module.
   The eager implementation applies no mask at all when given `None`, which is bidirectional as wanted.

The switch is idempotent (the model is marked with its current direction) and reversible (`bidirectional=False`
restores the causal behaviour for ablations). Architectures outside the allow-list fail loudly: other families
build their masks differently and a silent no-op would train a causal model while claiming otherwise.
"""

from __future__ import annotations

from torch import nn

from embedforge.model.backbone_spec import DECODER_TYPES

_MARKER = "_embedforge_bidirectional"


def check_supported(model_type: str) -> None:
    """Fail with a clear message for architectures whose masking this module has not been verified against."""
    if model_type not in DECODER_TYPES:
        raise ValueError(
            f"unsupported architecture {model_type!r} for the LLM embedder: supported model types are "
            f"{sorted(DECODER_TYPES)} (their attention masks are built by transformers.masking_utils, which "
            "honours config.is_causal); add the family to backbone_spec.DECODER_TYPES only after testing it"
        )


def set_attention_direction(model: nn.Module, bidirectional: bool = True) -> nn.Module:
    """Make `model` (a transformers Llama/Mistral/Qwen2 model, possibly peft-wrapped) attend both ways or causally.

    Returns the same model object. Calling it twice with the same value changes nothing.
    """
    config = getattr(model, "config", None)
    if config is None:
        raise TypeError(f"expected a transformers model with a .config, got {type(model).__name__}")
    check_supported(config.model_type)
    if getattr(model, _MARKER, None) is bidirectional:
        return model
    config.is_causal = not bidirectional
    patched = 0
    for module in model.modules():
        if hasattr(module, "is_causal") and hasattr(module, "layer_idx"):
            module.is_causal = not bidirectional
            patched += 1
    if patched == 0:
        raise RuntimeError(f"found no attention modules with an `is_causal` flag in {type(model).__name__}")
    setattr(model, _MARKER, bidirectional)
    return model


def is_bidirectional(model: nn.Module) -> bool:
    """True when `set_attention_direction(model, True)` was applied (and not reverted)."""
    return bool(getattr(model, _MARKER, False))
