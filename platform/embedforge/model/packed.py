"""Decoder forward passes over the real tokens only: a padded batch packed into one row, attention per text.

A batch of texts padded to its longest text makes every linear layer, norm and activation compute the padding
too; with an attention mask, PyTorch's SDPA also leaves its FlashAttention kernel for a slower one, and grouped
query attention repeats the keys and values in memory. Here the B x L padded batch becomes one row of the T real
tokens (positions restarting at each text), so every token-wise layer of the model's own modules runs on T rows,
and attention runs per text through variable-length attention: FlashAttention's varlen kernel on a CUDA GPU in half
precision (`torch.nn.attention.varlen`), a per-text SDPA loop anywhere else (the reference the kernel is tested
against, and the path the CPU tests exercise). Bidirectional models (NV-Embed 3.1) attend both ways within each
text, causal ones (e5-mistral's settings) causally; texts never see each other.

The attention function is registered with transformers' `AttentionInterface` as `embedforge_packed` and switched on
for the duration of a packed call only; transformers builds no mask for it. The last layer comes back in the
padded [B, L, d] layout (zeros at padding), which every pooling reads.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
import torch.nn.functional as F

PACKED_ATTENTION = "embedforge_packed"
HALF = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class PackedTokens:
    """The real tokens of a padded batch as one row: `input_ids` and `position_ids` (1, T), `cu_seqlens` (B + 1,
    int32: text i is tokens cu_seqlens[i]:cu_seqlens[i + 1]), the longest text, and `rows`, where each token sits
    in the padded batch flattened to B * L."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_length: int
    rows: torch.Tensor


def pack(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> PackedTokens:
    """Pack a padded batch (left or right padding). Token order within each text is kept."""
    real = attention_mask.flatten().bool()
    rows = real.nonzero().squeeze(1)
    lengths = attention_mask.sum(dim=1)
    cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32)
    return PackedTokens(
        input_ids=input_ids.flatten()[rows].unsqueeze(0),
        position_ids=position_ids.flatten()[rows].unsqueeze(0),
        cu_seqlens=cu_seqlens,
        max_length=int(lengths.max()) if lengths.numel() else 0,
        rows=rows,
    )


def unpack(states: torch.Tensor, packed: PackedTokens, batch: int, length: int) -> torch.Tensor:
    """(1, T, d) packed states back to the padded (B, L, d) layout, zeros at padding."""
    out = states.new_zeros(batch * length, states.shape[-1])
    out[packed.rows] = states[0]
    return out.view(batch, length, -1)


# torch's varlen FlashAttention entry point (torch >= 2.10) and whether it shares key/value heads itself (torch >=
# 2.13: `enable_gqa`; else they are repeated first). Imported on first use on a GPU (the import pulls in torch's
# fake tensors and sympy, which CPU actors never need), before any compiled block runs, so compiled code reads
# constants.
_KERNEL: dict[str, Any] = {}


def _kernel() -> dict[str, Any]:
    if not _KERNEL:
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            _KERNEL.update(fn=None, gqa=False)
        else:
            logging.getLogger("torch.nn.attention.varlen").setLevel(logging.WARNING)  # it logs every call
            _KERNEL.update(fn=varlen_attn, gqa="enable_gqa" in inspect.signature(varlen_attn).parameters)
    return _KERNEL


def uses_flash(query: torch.Tensor) -> bool:
    """Whether variable-length attention on `query` runs the fused CUDA kernel (else the per-text loop)."""
    return query.is_cuda and query.dtype in HALF and _kernel()["fn"] is not None


def varlen_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_length: int,
    causal: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention within each text of a packed row: `query` (T, H, D), `key` / `value` (T, H_kv, D), H a multiple of
    H_kv (grouped-query attention); returns (T, H, D)."""
    heads, kv_heads = query.shape[1], key.shape[1]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads")
    if uses_flash(query):
        kernel = _kernel()
        gqa: dict[str, bool] = {}
        if heads != kv_heads:
            if kernel["gqa"]:
                gqa = {"enable_gqa": True}
            else:
                key = key.repeat_interleave(heads // kv_heads, dim=1)
                value = value.repeat_interleave(heads // kv_heads, dim=1)
        window = (-1, 0) if causal else (-1, -1)
        return kernel["fn"](
            query, key, value, cu_seqlens, cu_seqlens, max_length, max_length, scale=scale, window_size=window, **gqa
        )
    bounds = cu_seqlens.tolist()
    parts = []
    for start, end in itertools.pairwise(bounds):
        q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))  # H, n, D
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=heads != kv_heads)
        parts.append(out.transpose(0, 1))
    return torch.cat(parts)


def packed_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function interface for one packed row: `query` (1, H, T, D), `key` / `value`
    (1, H_kv, T, D); the text bounds come as `cu_seq_lens_q` / `max_length_q` (the names transformers' own
    FlashAttention path passes). Returns (1, T, H, D), as every attention function does."""
    if query.shape[0] != 1:
        raise ValueError(f"packed attention takes one packed row, got a batch of {query.shape[0]}")
    if dropout:
        raise ValueError("packed attention has no attention dropout (the embedder's backbones train without it)")
    window = kwargs.get("sliding_window")
    max_length = kwargs["max_length_q"]  # not int(): under torch.compile it stays symbolic (no recompile per length)
    if window is not None and max_length > window:
        raise ValueError(f"a text of {max_length} tokens exceeds the model's sliding window of {window}")
    causal = bool(getattr(module, "is_causal", True))
    out = varlen_attention(
        query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
        kwargs["cu_seq_lens_q"], max_length, causal, scaling,
    )  # fmt: skip
    return out.unsqueeze(0), None


@cache
def _registered() -> str:
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_ATTENTION, packed_attention)
    return PACKED_ATTENTION


@contextmanager
def _attention(config: Any, implementation: str) -> Iterator[None]:
    previous = config._attn_implementation
    config._attn_implementation = implementation
    try:
        yield
    finally:
        config._attn_implementation = previous


def packed_last_hidden_state(
    backbone: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> torch.Tensor:
    """The decoder's last layer for a padded batch, computed on its real tokens only; (B, L, d), zeros at padding.
    `backbone` is a transformers decoder (Llama, Mistral, Qwen2), bare or LoRA-wrapped."""
    packed = pack(input_ids, attention_mask, position_ids)
    if input_ids.is_cuda:
        _kernel()  # resolved outside any compiled block
    with _attention(backbone.config, _registered()):
        out = backbone(
            input_ids=packed.input_ids,
            position_ids=packed.position_ids,
            cu_seq_lens_q=packed.cu_seqlens,
            cu_seq_lens_k=packed.cu_seqlens,
            max_length_q=packed.max_length,
            max_length_k=packed.max_length,
        )
    return unpack(out.last_hidden_state, packed, *input_ids.shape)
