"""WiSE-FT (train.wise_ft_alpha): the saved model is the trained one mixed with the starting model in weight
space, exactly, with LoRA and with full fine-tuning; the pooling head is kept; the switch reaches the model that
`finalize` saves and exports; off, it leaves configs' hashes alone."""

from __future__ import annotations

import pytest
import torch

from embedforge.config import load_config
from embedforge.config.train import TrainConfig
from embedforge.model import load_embedder
from embedforge.model.lora import merged_copy
from embedforge.train.checkpoint import TrainState, save_checkpoint
from embedforge.train.finish import finalize
from embedforge.train.schedule import make_optimizer, make_scheduler
from embedforge.train.trainable import build_trainable
from embedforge.train.wise_ft import interpolate_toward_start

TINY = "configs/tiny.yaml"


def _perturbed(config, seed: int = 0):
    """A trainable tiny embedder whose trainable weights moved away from their start, as training moves them."""
    embedder = build_trainable(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in embedder.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return embedder


def _linear_weights(model) -> dict[str, torch.Tensor]:
    """Each linear layer's weight by its plain name; of a LoRA model, the frozen base weights (no adapters)."""
    return {
        n.removeprefix("base_model.model.").replace(".base_layer", ""): m.weight.detach().clone()
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and ".lora_" not in n
    }


def test_lora_mix_scales_each_adapter_update_exactly():
    config = load_config(TINY)
    trained = _perturbed(config)
    start = _linear_weights(trained.backbone)  # the frozen base weights: where training began
    full = _linear_weights(merged_copy(trained.backbone))
    pooling = {n: p.clone() for n, p in trained.pooling.state_dict().items()}
    interpolate_toward_start(trained, 0.25)
    mixed = _linear_weights(merged_copy(trained.backbone))
    adapted = [n for n in mixed if not torch.equal(full[n], start[n])]
    assert len(adapted) >= 7  # every linear layer of the 2-layer Llama carries an adapter
    for name in mixed:
        torch.testing.assert_close(mixed[name], start[name] + 0.25 * (full[name] - start[name]), atol=1e-6, rtol=0)
    assert all(torch.equal(p, pooling[n]) for n, p in trained.pooling.state_dict().items())


def test_full_finetuning_mix_needs_and_uses_the_starting_weights():
    config = load_config(TINY, ["model.lora.enabled=false"])
    trained, start = _perturbed(config), build_trainable(config)
    before = {n: p.clone() for n, p in trained.backbone.named_parameters()}
    with pytest.raises(ValueError, match="needs the starting model"):
        interpolate_toward_start(trained, 0.5)
    interpolate_toward_start(trained, 0.5, start)
    origin = dict(start.backbone.named_parameters())
    for name, weight in trained.backbone.named_parameters():
        torch.testing.assert_close(weight, 0.5 * before[name] + 0.5 * origin[name], atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]"):
        interpolate_toward_start(trained, 1.5, start)


def test_finalize_saves_and_exports_the_mixed_model(tmp_path):
    config = load_config(TINY, ["train.wise_ft_alpha=0.5"])
    trained = _perturbed(config, seed=1)
    optimizer = make_optimizer([p for p in trained.parameters() if p.requires_grad], 1e-3, 0.0)
    checkpoint = save_checkpoint(
        tmp_path / "checkpoint",
        trained,
        optimizer,
        make_scheduler(optimizer, 0, 1),
        TrainState(6, 1, 2, "none", None, "h"),
    )
    finalize(config, checkpoint, tmp_path / "train")
    saved = load_embedder(str(tmp_path / "train" / "model"))
    expected = dict(trained.backbone.named_parameters())
    lora_b = [(n, p) for n, p in saved.backbone.named_parameters() if "lora_B" in n]
    assert lora_b
    for name, weight in lora_b:
        torch.testing.assert_close(weight, 0.5 * expected[name].detach(), atol=1e-6, rtol=0)
    merged = _linear_weights(load_embedder(str(tmp_path / "train" / "export" / "merged")).backbone)
    interpolate_toward_start(trained, 0.5)
    want = _linear_weights(merged_copy(trained.backbone))
    for name, weight in merged.items():
        torch.testing.assert_close(weight, want[name], atol=1e-5, rtol=0)


def test_the_switch_is_checked_and_off_by_default_without_changing_hashes():
    assert "wise_ft_alpha" not in TrainConfig().model_dump()
    assert TrainConfig(wise_ft_alpha=0.7).model_dump()["wise_ft_alpha"] == 0.7
    for bad in (0, 1.2):
        with pytest.raises(ValueError, match="wise_ft_alpha"):
            TrainConfig(wise_ft_alpha=bad)
