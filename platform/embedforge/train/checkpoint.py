"""Training checkpoints: trainable weights (LoRA adapter + pooling head), optimizer, scheduler and position.

The position is the global step; with the deterministic batch plan and per-step seeding that fixes the data
order, the curriculum level and the dropout masks, so a resumed run continues exactly where the checkpoint stopped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

WEIGHTS, OPTIMIZER, SCHEDULER, STATE = "trainable.pt", "optimizer.pt", "scheduler.pt", "state.json"


@dataclass
class TrainState:
    global_step: int  # optimizer steps done over all stages
    stage_index: int  # stage of the last step done
    stage_step: int  # steps done within that stage
    curriculum: str
    level: int | None  # negative level of the last step
    config_hash: str


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    state: TrainState,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    torch.save(trainable_state(model), directory / WEIGHTS)
    torch.save(optimizer.state_dict(), directory / OPTIMIZER)
    torch.save(scheduler.state_dict(), directory / SCHEDULER)
    (directory / STATE).write_text(json.dumps(asdict(state), indent=2))
    return directory


def read_state(directory: Path) -> TrainState:
    return TrainState(**json.loads((directory / STATE).read_text()))


def load_weights(directory: Path, model: nn.Module) -> None:
    """Restore the trainable weights; every trainable parameter must be in the checkpoint."""
    saved = torch.load(directory / WEIGHTS, map_location="cpu")
    params = dict(model.named_parameters())
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in saved)
    if missing:
        raise ValueError(f"checkpoint {directory} lacks {len(missing)} trainable tensors, e.g. {missing[0]}")
    with torch.no_grad():
        for name, value in saved.items():
            params[name].copy_(value)


def load_optimizer(
    directory: Path, optimizer: torch.optim.Optimizer, scheduler: torch.optim.lr_scheduler.LRScheduler
) -> None:
    optimizer.load_state_dict(torch.load(directory / OPTIMIZER, map_location="cpu"))
    scheduler.load_state_dict(torch.load(directory / SCHEDULER, map_location="cpu"))


def is_checkpoint(directory: Path) -> bool:
    return all((directory / name).is_file() for name in (WEIGHTS, OPTIMIZER, SCHEDULER, STATE))


def run_checkpoints(storage: Path, config_hash: str) -> dict[int, Path]:
    """The complete checkpoints under `storage` written for this config, by global step."""
    found = {}
    for state_file in storage.glob(f"**/checkpoint-step*/{STATE}"):
        folder = state_file.parent
        if is_checkpoint(folder) and (state := read_state(folder)).config_hash == config_hash:
            found[state.global_step] = folder
    return dict(sorted(found.items()))


def latest_checkpoint(storage: Path, config_hash: str) -> Path | None:
    """The complete checkpoint with the most steps under `storage` written for this config.

    Used to resume a stopped run, and by restarted workers when Ray Train had not yet registered the newest
    checkpoint before a worker died (its report was still queued): the files are persisted before reporting.
    """
    found = run_checkpoints(storage, config_hash)
    return found[max(found)] if found else None
