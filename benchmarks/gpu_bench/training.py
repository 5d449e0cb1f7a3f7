"""Training steps: the production profile's step (configs/nv-embed-v2.yaml: bidirectional backbone, LoRA r16 on
every linear layer, latent-attention pooling, bf16, InfoNCE with in-batch and 7 hard negatives, GradCache) through
the train worker's own `StepRunner`, against sentence-transformers training the same model with PEFT LoRA and its
CachedMultipleNegativesRankingLoss (GradCache too) on the same batch.

A batch is the production per-GPU share (NV-Embed 4.2: 128 queries over 32 GPUs, 4 each), each query with its
positive and 7 hard negatives. Uniform: queries and documents of 512 tokens (the production maximum), the FLOP-heavy
case; mixed: queries of 8-64 tokens, documents of 32-512, where padding and chunking cost. Useful FLOPs per step
come from `embedforge.model.flops` (forward, activation gradients, adapter and pooling weight gradients; GradCache's
first pass not counted), for both systems.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import torch

from embedforge.config import load_config
from embedforge.data.schema import TrainingExample
from embedforge.model.flops import EmbedderFlops, TransformerShape, mfu
from embedforge.paths import REPO_ROOT
from embedforge.train.batching import Batch, BatchItem

from .measure import keep, peak_gib, profile, reset_peak, timed
from .texts import TextCutter

log = logging.getLogger("bench.gpu.train")
PROFILE = REPO_ROOT / "configs" / "nv-embed-v2.yaml"
NEGATIVES = 7


def profile_config(folder: Path, settings: dict[str, Any], compiled: bool) -> Any:
    """configs/nv-embed-v2.yaml on this backbone folder and lengths (its model and train sections as they are)."""
    length = settings["max_length"]
    gpu = str(settings["device"] == "cuda").lower()
    overrides = [
        f"model.backbone={folder}",
        f"model.max_query_length={length}",
        f"model.max_doc_length={length}",
        f"model.compile={str(compiled).lower()}",
        "train.num_workers=1",
        f"train.use_gpu={gpu}",
    ]
    if settings.get("latents"):
        overrides.append(f"model.latent_attention.num_latents={settings['latents']}")
    return load_config(PROFILE, overrides)


def make_batch(
    cutter: TextCutter, queries: int, query_lengths: tuple[int, int], doc_lengths: tuple[int, int], seed: int
) -> Batch:
    """`queries` examples, each a query, a positive and 7 hard negatives cut to lengths drawn from the ranges."""
    low_q, high_q = query_lengths
    low_d, high_d = doc_lengths
    qs = cutter.mixed(queries, low_q, high_q, seed) if low_q < high_q else cutter.uniform(queries, high_q)
    docs = (
        cutter.mixed(queries * (1 + NEGATIVES), low_d, high_d, seed + 1)
        if low_d < high_d
        else cutter.uniform(queries * (1 + NEGATIVES), high_d)
    )
    items = []
    for i, query in enumerate(qs):
        positive, *negatives = docs[i * (1 + NEGATIVES) : (i + 1) * (1 + NEGATIVES)]
        example = TrainingExample(
            id=f"bench-{seed}-{i}", task_name="bench", task_type="retrieval",
            instruction="Given a web search query, retrieve relevant passages that answer the query",
            query=query, positive=positive, negatives=negatives,
        )  # fmt: skip
        items.append(BatchItem(example, negatives, [math.nan] * (1 + NEGATIVES)))
    return Batch(step=seed, source="bench", level=None, items=items)


def step_rows(name: str, times: list[float], tokens: int, flops: int, peaks: dict[str, float], memory: float) -> dict:
    seconds = sorted(times)[len(times) // 2]  # the median step
    row: dict[str, Any] = {
        "system": name,
        "steps": len(times),
        "step_s": round(seconds, 3),
        "tokens_per_step": tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "model_tflops_per_s": round(flops / seconds / 1e12, 2),
        "peak_gib": memory,
    }
    for peak_name, peak in peaks.items():
        row[f"mfu_{peak_name}"] = round(mfu(flops, seconds, peak), 4)
    return row


def workloads(settings: dict[str, Any], cutter: TextCutter, queries: int) -> dict[str, list[Batch]]:
    length, steps = settings["max_length"], settings["train"]["warmup"] + settings["train"]["steps"]
    return {
        "uniform": [make_batch(cutter, queries, (length, length), (length, length), s) for s in range(steps)],
        "mixed": [make_batch(cutter, queries, (8, 64), (32, length), 100 + s) for s in range(steps)],
    }


def ours_phase(
    settings: dict[str, Any], folder: Path, compiled: bool, queries: int, which: list[str]
) -> dict[str, Any]:
    """embedforge's step: `StepRunner` as every Ray Train worker runs it."""
    from embedforge.train.inputs import Encoder, batch_inputs
    from embedforge.train.schedule import make_optimizer
    from embedforge.train.trainable import build_trainable
    from embedforge.train.worker import StepRunner, use_bf16

    device, peaks = settings["device"], settings["peaks"]
    config = profile_config(folder, settings, compiled)
    stage, train = config.train.stages[0], config.train
    torch.manual_seed(0)
    bf16 = use_bf16(train, torch.device(device))
    embedder = build_trainable(config, bf16).to(device)
    embedder.train()
    encoder = Encoder(embedder, embedder, train.micro_batch_size)
    runner = StepRunner(encoder, embedder, train, bf16, None)
    optimizer = make_optimizer(embedder.parameters(), stage.learning_rate, train.weight_decay)
    lora = config.model.lora.r if config.model.lora.enabled else 0
    latent = config.model.latent_attention
    flops = EmbedderFlops(
        TransformerShape.of(embedder.backbone.config), lora, latent.num_latents,
        round(embedder.backbone.config.hidden_size * latent.mlp_ratio),
    )  # fmt: skip
    cutter = TextCutter(embedder.tokenizer)
    out: dict[str, Any] = {
        "queries_per_step": queries,
        "gradcache": train.gradcache.model_dump(),
        "compiled": compiled,
        "trainable_parameters": sum(p.numel() for p in embedder.parameters() if p.requires_grad),
    }
    warmup = settings["train"]["warmup"] + (1 if compiled else 0)
    for workload, batches in workloads(settings, cutter, queries).items():
        if workload not in which:
            continue
        times, tokens, lengths = [], 0, []
        for i, batch in enumerate([batches[0]] * (warmup - settings["train"]["warmup"]) + batches):
            if i == warmup:
                reset_peak(device)
            seconds, metrics = timed(lambda b=batch: runner(b, stage, optimizer), device)
            log.info("%s step %d: %.2f s, loss %.4f", workload, i, seconds, metrics["loss"])
            if i >= warmup:
                times.append(seconds)
                tokens = metrics["tokens"]
                queries_in, documents, _ = batch_inputs(batch)
                lengths = encoder.token_lengths(queries_in) + encoder.token_lengths(documents)
        row = step_rows(
            "embedforge" + (" compiled" if compiled else ""),
            times,
            tokens,
            flops.train_step(lengths),
            peaks,
            peak_gib(device),
        )
        row["loss_finite"] = bool(math.isfinite(metrics["loss"]))
        if settings["train"].get("profile"):
            row["profile"] = profile(lambda b=batches[-1]: runner(b, stage, optimizer), device)
        out[workload] = row
        log.info("%s: %s", workload, row)
        keep(out)
    uniform = workloads(settings, cutter, queries)["uniform"]
    for chunk_tokens in settings["train"].get("chunk_sweep", []) if "uniform" in which else []:
        runner.chunk_tokens = chunk_tokens  # what train.gradcache.chunk_tokens would set: memory against speed
        runner(uniform[0], stage, optimizer)
        reset_peak(device)
        seconds, metrics = timed(lambda b=uniform[-1]: runner(b, stage, optimizer), device)
        lengths = [settings["max_length"]] * (len(uniform[-1].items) * (2 + NEGATIVES))
        row = step_rows("embedforge", [seconds], metrics["tokens"], flops.train_step(lengths), peaks, peak_gib(device))
        out.setdefault("chunk_sweep", {})[str(chunk_tokens)] = row
        log.info("chunk_tokens %d: %s", chunk_tokens, row)
        keep(out)
    return out


def st_phase(settings: dict[str, Any], folder: Path, queries: int) -> dict[str, Any]:
    """sentence-transformers: PEFT LoRA r16 on every linear layer (alpha 32, dropout 0.1), CachedMNRL with a
    mini-batch of the profile's GradCache chunk, the columns a user gives it (anchor, positive, negative_1..7), in
    bf16 autocast. Tokens and FLOPs are its own (no instruction before the queries)."""
    from peft import LoraConfig
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    from embedforge.train.inputs import batch_inputs

    from .encoding import sentence_transformer

    device, peaks = settings["device"], settings["peaks"]
    config = profile_config(folder, settings, compiled=False)
    torch.manual_seed(0)
    st = sentence_transformer(folder, device, settings["max_length"], decoder=True)
    st.add_adapter(LoraConfig(r=16, lora_alpha=32, lora_dropout=0.1, target_modules="all-linear"))
    st.train()
    trainable = sum(p.numel() for p in st.parameters() if p.requires_grad)
    log.info("sentence-transformers: %.1fM trainable parameters (LoRA)", trainable / 1e6)
    cache = config.train.gradcache  # the same activation memory: texts of the maximum length per chunk
    chunk = cache.chunk_size if cache.chunk_tokens is None else max(1, cache.chunk_tokens // settings["max_length"])
    loss = CachedMultipleNegativesRankingLoss(st, mini_batch_size=chunk)
    optimizer = torch.optim.AdamW([p for p in st.parameters() if p.requires_grad], lr=2e-5)
    flops = EmbedderFlops(TransformerShape.of(st[0].auto_model.config), lora_rank=16)  # mean pooling: no weights
    cutter = TextCutter(st.tokenizer)
    out: dict[str, Any] = {
        "queries_per_step": queries,
        "mini_batch_size": loss.mini_batch_size,
        "trainable_parameters": trainable,
    }
    warmup = settings["train"]["warmup"]
    autocast = torch.autocast(device, dtype=torch.bfloat16)
    for workload, batches in workloads(settings, cutter, queries).items():
        times, lengths = [], []
        for i, batch in enumerate(batches):
            queries_in, documents, per = batch_inputs(batch)
            columns = [[q.text for q in queries_in]] + [
                [documents[j * per + k].text for j in range(len(queries_in))] for k in range(per)
            ]
            features = [
                {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in st.preprocess(col).items()}
                for col in columns
            ]
            if i == warmup:
                reset_peak(device)

            def step(f=features) -> float:
                with autocast:
                    value = loss(f, None)
                value.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                return float(value.detach())

            seconds, value = timed(step, device)
            log.info("sentence-transformers %s step %d: %.2f s, loss %.4f", workload, i, seconds, value)
            if i >= warmup:
                times.append(seconds)
                lengths = [int(n) for f in features for n in f["attention_mask"].sum(dim=1).tolist()]
        row = step_rows(
            "sentence-transformers", times, sum(lengths), flops.train_step(lengths), peaks, peak_gib(device)
        )
        out[workload] = row
        log.info("%s: %s", workload, row)
    return out
