"""Regional compilation: a decoder's transformer blocks compiled with torch.compile, dynamic shapes.

Eager PyTorch runs every norm, activation, rotary embedding and LoRA adapter (dropout, two thin matrix products,
scaling, the add) as kernels of their own, each reading and writing the whole activation; between the large matrix
products that is time the tensor cores idle. Compiling each block fuses those element-wise chains. All blocks of a
model share one compiled graph (PyTorch inlines built-in modules and treats their weights as inputs), compiled once
for dynamic token counts (packed batches, `packed.py`, differ in length every step). GradCache replays each chunk's
random state to redraw its dropout masks, so compiled code draws them from torch's generators as eager code does
(`torch._inductor.config.fallback_random`).
"""

from __future__ import annotations

from torch import nn

from embedforge.model.backbone import transformer_blocks


def compile_blocks(backbone: nn.Module) -> int:
    """Compile every transformer block of `backbone` (bare or LoRA-wrapped) in place; blocks already compiled are
    left as they are. Returns how many blocks were newly compiled."""
    import torch._inductor.config as inductor

    inductor.fallback_random = True
    _, blocks = transformer_blocks(backbone)
    fresh = [block for block in blocks if getattr(block, "_compiled_call_impl", None) is None]
    for block in fresh:
        block.compile(dynamic=True)
    return len(fresh)
