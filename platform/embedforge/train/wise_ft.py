"""WiSE-FT (Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022, section 2, eq. 1): the trained
weights moved back toward the starting model's, theta_alpha = (1 - alpha) * theta_start + alpha * theta_trained.
The paper finds the mixed model better than both ends on data unlike the fine-tuning data, while keeping most of
the fine-tuned gain on data like it.

With LoRA the starting model is the backbone without adapters, and each adapted weight is W + s * B A, so the mix
is every adapter's update scaled by alpha: each `lora_B` weight times alpha (exact, no starting copy needed). With
full fine-tuning every backbone weight is mixed with the starting backbone's. The pooling head (latent attention)
starts from random weights, not from a model worth returning to, and is kept as trained.
"""

from __future__ import annotations

import torch

from embedforge.model.embedder import Embedder
from embedforge.model.lora import is_peft


def interpolate_toward_start(trained: Embedder, alpha: float, start: Embedder | None = None) -> None:
    """Mix `trained`'s backbone in place: alpha 1 keeps it, 0 returns to the start. `start` (the untrained
    embedder) is needed without LoRA only."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"WiSE-FT alpha must be in [0, 1], got {alpha}")
    with torch.no_grad():
        if is_peft(trained.backbone):
            scaled = [p for name, p in trained.backbone.named_parameters() if "lora_B" in name]
            if not scaled:
                raise ValueError("WiSE-FT: the LoRA backbone has no lora_B weights to scale")
            for weight in scaled:
                weight.mul_(alpha)
            return
        if start is None:
            raise ValueError("WiSE-FT without LoRA needs the starting model's weights")
        origin = dict(start.backbone.named_parameters())
        for name, weight in trained.backbone.named_parameters():
            weight.mul_(alpha).add_(origin[name].to(weight.dtype), alpha=1 - alpha)
