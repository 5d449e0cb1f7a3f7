"""The end of training, in a Ray task that holds what one training worker held: checkpoint selection on the
validation slice (`train.select_checkpoint`), WiSE-FT, saving and exporting the trained model.

On a GPU cluster the job's driver runs on a CPU head with no room for a 7B model, so this work goes where the
training workers ran: the task reserves one worker's CPUs, a GPU when training used them, and `train.resources`
(the node group training is pinned to). It works on the run in its own node's mirror when the run is in object
storage (`runs.store.staged`: pulled before, pushed after), so the driver then pulls only the model and exports.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from embedforge.config import EmbedforgeConfig
from embedforge.evaluate.run import selection_vectors_dir
from embedforge.model.export import export_every_format
from embedforge.model.persistence import save_embedder
from embedforge.runs.stage import StageRun
from embedforge.runs.store import staged
from embedforge.train.checkpoint import load_weights, run_checkpoints
from embedforge.train.layout import RAY_DIR, STAGE
from embedforge.train.selection import best_step, score_checkpoints
from embedforge.train.tracking import TENSORBOARD_DIR, log_selection
from embedforge.train.wise_ft import interpolate_toward_start

log = logging.getLogger(__name__)
OUTPUTS = ("model", "export", TENSORBOARD_DIR)  # what finishing writes into the train folder; the driver pulls them


def finalize(
    config: EmbedforgeConfig, checkpoint_dir: Path, out_dir: Path, card: dict[str, Any] | None = None
) -> dict[str, str]:
    """Load the final checkpoint into a fresh trainable embedder, mix it with the starting model when
    `train.wise_ft_alpha` < 1 (WiSE-FT), save it and export it (`card`: what the exports' model card says of the
    run, `model.card.render_card`)."""
    from embedforge.train.trainable import build_trainable

    embedder = build_trainable(config)
    load_weights(checkpoint_dir, embedder)
    alpha = config.train.wise_ft_alpha
    if alpha < 1:
        start = None if config.model.lora.enabled else build_trainable(config)
        interpolate_toward_start(embedder, alpha, start)
        log.info("train: WiSE-FT, the saved model is %.2f x trained + %.2f x starting weights", alpha, 1 - alpha)
    embedder.eval()
    paths = {"model": str(save_embedder(embedder, out_dir / "model"))}  # its adapters, before the exports merge them
    exports = export_every_format(embedder, out_dir / "export", card)
    return paths | {fmt: str(path) for fmt, path in exports.items()}


def select_and_finalize(
    config: EmbedforgeConfig, run_dir: Path, key: str, final_step: int, threads: int, card: dict[str, Any] | None = None
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """In the local run dir `run_dir`: pick the checkpoint (the best on the validation slice, or the final one),
    then finalize it. Returns the written paths relative to `run_dir`, and the selection record (None without
    selection)."""
    train_dir = run_dir / STAGE
    candidates = run_checkpoints(train_dir / RAY_DIR, key)
    if final_step not in candidates:
        raise RuntimeError(f"train: no checkpoint of step {final_step} under {train_dir / RAY_DIR}")
    chosen, selection, recording = candidates[final_step], None, None
    if config.train.select_checkpoint:
        scores, recording = score_checkpoints(config, run_dir, candidates, threads)
        step = best_step(scores)
        chosen, selection = candidates[step], {"scores": scores, "selected_step": step}
        log_selection(train_dir, scores, step)
        log.info("train: checkpoint at step %d selected on the validation slice", step)
    vectors_dir = selection_vectors_dir(run_dir)
    shutil.rmtree(vectors_dir, ignore_errors=True)  # an earlier model's
    if card is not None and selection is not None:
        card = {**card, "training_run": {**card.get("training_run", {}), "selected step": selection["selected_step"]}}
    paths = finalize(config, chosen, train_dir, card)
    # only when evaluation encodes with the scored checkpoint's weights as they were scored: not mixed by WiSE-FT,
    # not quantized to int8
    if recording is not None and config.train.wise_ft_alpha == 1 and not config.model.int8_inference:
        recording.save(vectors_dir)
    return {name: str(Path(path).relative_to(run_dir)) for name, path in paths.items()}, selection


def _finish_task(
    config: dict[str, Any], run_ref: str, key: str, final_step: int, card: dict[str, Any]
) -> tuple[dict, dict | None]:
    import ray

    threads = max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))
    with staged(run_ref) as local:
        return select_and_finalize(EmbedforgeConfig.model_validate(config), local, key, final_step, threads, card)


def finish_training(
    config: EmbedforgeConfig, stage: StageRun, run_dir: Path, key: str, final_step: int, card: dict[str, Any]
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """Run `select_and_finalize` as a Ray task with one training worker's resources and wait for it; returns the
    absolute paths it wrote in this run dir and the selection record."""
    import ray

    train = config.train
    run_ref = stage.store.uri if stage.store is not None else str(run_dir)
    task = ray.remote(_finish_task).options(
        num_cpus=train.cpus_per_worker, num_gpus=1 if train.use_gpu else 0, resources=train.resources
    )
    relative, selection = ray.get(task.remote(config.model_dump(mode="json"), run_ref, key, final_step, card))
    if stage.store is not None:  # what the task pushed from its node's mirror
        for name in OUTPUTS:
            stage.store.pull(stage.dir / name, f"{STAGE}/{name}", exact=True)
    return {name: str(run_dir / rel) for name, rel in relative.items()}, selection
