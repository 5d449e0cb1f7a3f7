"""Model FLOPs of the embedder's forward and training passes, counted from a backbone's config, and MFU.

The convention of PaLM (Chowdhery et al. 2022, appendix B) and the MFU literature: matrix multiplications only,
2 FLOPs per multiply-add; norms, activations, the embedding lookup and softmax are left out. Per token and layer a
linear layer of `i` inputs and `o` outputs costs 2io; attention over a text of n tokens costs 4n^2 d_attn per layer
(scores and weighted values, d_attn = heads x head_dim), half of it for a causal model (FlashAttention skips the
masked blocks). A LoRA adapter of rank r (NV-Embed appendix C) adds 2r(i + o) per token; latent-attention pooling
(NV-Embed 3.2) adds 4 r_latents d per token for its cross-attention and its MLP's two linear layers.

Training counts what a step must compute ("useful" FLOPs): the forward pass, every activation gradient (a linear
layer's equals its forward; attention's is twice its forward) and the weight gradients of trained weights only
(LoRA adapters, the pooling head), never the frozen base weights' gradients. Work a method repeats is not useful:
GradCache's first, gradient-free forward pass and activation checkpointing's recomputed forward are left out, so
MFU says how much of the chip turned into training.

MFU is useful FLOPs per second over a peak: the chip's dense bf16 rate from its datasheet, or a matrix-product rate
measured on the same chip (`benchmarks/gpu.py` measures one in each run).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# dense (not 2:4 sparse) bf16 tensor-core peaks from the vendors' datasheets, FLOP/s, by a substring of the name
# torch.cuda.get_device_name gives
DATASHEET_BF16 = {
    "H200": 989.4e12,
    "H100 SXM": 989.4e12,
    "H100 80GB HBM3": 989.4e12,
    "H100 PCIe": 756.0e12,
    "H100": 989.4e12,
    "A100": 312.0e12,
    "L40S": 362.05e12,
    "A10G": 70.0e12,
}


def datasheet_bf16_flops(device_name: str) -> float | None:
    """The dense bf16 peak of a GPU by its name (the first listed substring it contains), or None when unknown."""
    return next((peak for key, peak in DATASHEET_BF16.items() if key in device_name), None)


@dataclass(frozen=True)
class TransformerShape:
    """What the FLOP count needs of a transformer backbone: `gated` MLPs (SwiGLU: gate, up and down projections)
    as in Llama / Mistral / Qwen2, else two projections (BERT)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    gated: bool

    @classmethod
    def of(cls, config: Mapping[str, Any] | Any) -> TransformerShape:
        """From a config.json (a dict) or a transformers config object."""
        get = config.get if isinstance(config, Mapping) else lambda key, default=None: getattr(config, key, default)
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        return cls(
            hidden=hidden,
            layers=int(get("num_hidden_layers")),
            heads=heads,
            kv_heads=int(get("num_key_value_heads") or heads),
            head_dim=int(get("head_dim") or hidden // heads),
            intermediate=int(get("intermediate_size")),
            gated=get("model_type") in ("llama", "mistral", "qwen2"),
        )

    def linears(self) -> list[tuple[int, int]]:
        """(inputs, outputs) of each linear layer of one transformer block."""
        attention = self.heads * self.head_dim
        kv = self.kv_heads * self.head_dim
        mlp = [(self.hidden, self.intermediate)] * (2 if self.gated else 1) + [(self.intermediate, self.hidden)]
        return [(self.hidden, attention), (self.hidden, kv), (self.hidden, kv), (attention, self.hidden), *mlp]

    def linear_flops_per_token(self) -> int:
        """Forward FLOPs of every block's linear layers for one token."""
        return self.layers * sum(2 * i * o for i, o in self.linears())

    def lora_flops_per_token(self, rank: int) -> int:
        """Forward FLOPs of rank-`rank` adapters on every linear layer of every block, for one token."""
        return self.layers * sum(2 * rank * (i + o) for i, o in self.linears())

    def attention_flops(self, lengths: Sequence[int], causal: bool = False) -> int:
        """Forward FLOPs of attention over texts of these lengths (each attends within itself)."""
        full = sum(4 * n * n * self.heads * self.head_dim for n in lengths) * self.layers
        return full // 2 if causal else full


@dataclass(frozen=True)
class EmbedderFlops:
    """The FLOP count of an embedder: a backbone shape, LoRA rank (0: none) and latent-attention pooling (0
    latents: another pooling, whose cost is left out)."""

    shape: TransformerShape
    lora_rank: int = 0
    latents: int = 0
    pooling_mlp: int = 0  # the latent-attention MLP's inner width (hidden x mlp_ratio)
    causal: bool = False

    def pooling_flops_per_token(self) -> int:
        if not self.latents:
            return 0
        d = self.shape.hidden
        return 4 * self.latents * d + 2 * (2 * d * self.pooling_mlp)

    def forward(self, lengths: Sequence[int]) -> int:
        """One forward pass over texts of these lengths (real tokens only)."""
        tokens = sum(lengths)
        per_token = self.shape.linear_flops_per_token() + self.shape.lora_flops_per_token(self.lora_rank)
        per_token += self.pooling_flops_per_token()
        return tokens * per_token + self.shape.attention_flops(lengths, self.causal)

    def train_step(self, lengths: Sequence[int]) -> int:
        """The useful FLOPs of one training step over texts of these lengths (see the module docstring): forward,
        activation gradients, and weight gradients of the adapters and the pooling head."""
        tokens = sum(lengths)
        base = self.shape.linear_flops_per_token()
        trained = self.shape.lora_flops_per_token(self.lora_rank) + self.pooling_flops_per_token()
        attention = self.shape.attention_flops(lengths, self.causal)
        # forward + activation gradients (a linear's equal its forward) + weight gradients of trained weights
        return tokens * (2 * base + 3 * trained) + 3 * attention


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: `flops` done in `seconds` over the peak rate."""
    if seconds <= 0 or peak_flops_per_s <= 0:
        raise ValueError(f"MFU needs positive time and peak, got {seconds} s and {peak_flops_per_s} FLOP/s")
    return flops / seconds / peak_flops_per_s
