"""Encoding: embedforge's `Embedder.encode` (what evaluation, mining's dense teachers and serving run) against
sentence-transformers' `encode` of the same random-weight model, on uniform texts at the maximum length and on a
realistic mix of lengths.

Both sides get the same model from the same folder in bf16, attend both ways (a decoder is switched to bidirectional
on both sides, NV-Embed 3.1, so they do the same FLOPs) and mean-pool. Tokens are counted once, with embedforge's
tokenization (a closing EOS on decoders), for both; FLOPs come from `embedforge.model.flops`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from embedforge.config.model import ModelConfig
from embedforge.model.flops import EmbedderFlops, TransformerShape, mfu

from .measure import keep, peak_gib, reset_peak, timed
from .texts import TextCutter

log = logging.getLogger("bench.gpu.encode")


def rates(name: str, texts: int, lengths: list[int], seconds: float, flops: int, peaks: dict[str, float]) -> dict:
    tokens = sum(lengths)
    row: dict[str, Any] = {
        "system": name,
        "texts": texts,
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "texts_per_s": round(texts / seconds, 1),
        "tokens_per_s": round(tokens / seconds, 1),
        "model_tflops_per_s": round(flops / seconds / 1e12, 2),
    }
    for peak_name, peak in peaks.items():
        row[f"mfu_{peak_name}"] = round(mfu(flops, seconds, peak), 4)
    return row


def sentence_transformer(folder: Path, device: str, max_length: int, decoder: bool) -> Any:
    """sentence-transformers over the bare folder (Transformer + mean pooling), bf16, both-way attention."""
    from sentence_transformers import SentenceTransformer

    from embedforge.model.bidirectional import set_attention_direction

    model = SentenceTransformer(str(folder), device=device, model_kwargs={"dtype": torch.bfloat16})
    model.max_seq_length = max_length
    if model.tokenizer.pad_token is None:
        model.tokenizer.pad_token = model.tokenizer.eos_token
    if decoder:
        set_attention_direction(model[0].auto_model, True)
    return model.eval()


def encode_phase(settings: dict[str, Any], shape: str, folder: Path) -> dict[str, Any]:
    """Texts per second, tokens per second and MFU of both systems on both workloads."""
    from embedforge.model import load_embedder

    device, plan = settings["device"], settings["encode"][shape]
    max_length = settings["max_length"]
    config = ModelConfig(
        backbone=str(folder), pooling="mean", bidirectional=True, dtype="bfloat16",
        max_query_length=max_length, max_doc_length=max_length,
    )  # fmt: skip
    embedder = load_embedder(config, device=device).to(device)
    cutter = TextCutter(embedder.tokenizer)
    workloads = {
        "uniform": cutter.uniform(plan["uniform"], max_length),
        "mixed": cutter.mixed(plan["mixed"], plan["mixed_low"], max_length),
    }
    counts = {k: embedder.tokenize(v, kind="document").attention_mask.sum(dim=1).tolist() for k, v in workloads.items()}
    flops = EmbedderFlops(TransformerShape.of(embedder.backbone.config))
    results: dict[str, Any] = {"shape": shape, "batch_size": plan["batch"], "workloads": {}}
    warm = workloads["mixed"][: 2 * plan["batch"]]

    def measure(name: str, encode: Any, workload: str) -> dict[str, Any]:
        reset_peak(device)
        seconds, _ = timed(lambda: encode(workloads[workload]), device)
        row = rates(
            name,
            len(workloads[workload]),
            counts[workload],
            seconds,
            flops.forward(counts[workload]),
            settings["peaks"],
        )
        row["peak_gib"] = peak_gib(device)
        results["workloads"].setdefault(workload, []).append(row)
        log.info("%s %s: %s", shape, workload, row)
        keep({shape: results})
        return row

    embedder.encode_documents(warm, batch_size=plan["batch"])
    for workload in workloads:
        measure("embedforge", lambda t: embedder.encode_documents(t, batch_size=plan["batch"]), workload)
    if plan.get("model_only"):  # the GPU's share: the same batches tokenized beforehand, only the model timed
        for workload, texts in workloads.items():
            batches, _ = embedder.batch_plan(texts, None, "document", plan["batch"])
            inputs = [embedder.tokenize([texts[i] for i in idx], kind="document").to(device) for idx in batches]
            measure("embedforge", lambda _t, b=inputs: forward_all(embedder, b), workload)["model_only"] = True
    # the fast path (packed decoder / unpadded BERT on real tokens) against the model's own padded forward
    sample = workloads["mixed"][:32]
    fast = embedder.encode_documents(sample, batch_size=8)
    embedder.packing, embedder.unpadded_inference = "never", False
    padded = embedder.encode_documents(sample, batch_size=8)
    results["fast_path_min_cosine_vs_padded"] = round(float((fast * padded).sum(axis=1).min()), 6)
    embedder.to("cpu")  # sentence-transformers gets the GPU to itself
    if device == "cuda":
        torch.cuda.empty_cache()
    st = sentence_transformer(folder, device, max_length, TransformerShape.of(embedder.backbone.config).gated)
    st.encode(warm, batch_size=plan["batch"])
    for workload in workloads:
        for label, batch in (("default", plan["st_default_batch"]), ("same", plan["batch"])):
            name = f"sentence-transformers (batch {batch})"
            row = measure(name, lambda t, b=batch: st.encode(t, batch_size=b, convert_to_numpy=True), workload)
            row["batch"] = label
    if plan.get("model_only"):  # its own batches (longest first, as its encode sorts them), tokenized beforehand
        for workload, texts in workloads.items():
            order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
            chunks = [order[i : i + plan["batch"]] for i in range(0, len(order), plan["batch"])]
            features = [on_device(st.preprocess([texts[i] for i in idx]), device) for idx in chunks]
            name = f"sentence-transformers (batch {plan['batch']})"
            row = measure(name, lambda _t, f=features: forward_all(st, f), workload)
            row.update(model_only=True, batch="same")
    return results


@torch.inference_mode()
def forward_all(model: Any, batches: list[Any]) -> None:
    for batch in batches:
        model(batch)


def on_device(features: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}


def best_vs(rows: list[dict[str, Any]], key: str = "tokens_per_s") -> dict[str, float]:
    """embedforge's rate over each sentence-transformers setting's, and over the best of them (texts to vectors;
    rows timing the model alone are left out)."""
    rows = [r for r in rows if not r.get("model_only")]
    ours = next(r[key] for r in rows if r["system"] == "embedforge")
    theirs = {r["batch"]: r[key] for r in rows if r["system"] != "embedforge"}
    out = {f"vs_st_{label}": round(ours / rate, 3) for label, rate in theirs.items()}
    out["vs_st_best"] = round(ours / max(theirs.values()), 3)
    return out
