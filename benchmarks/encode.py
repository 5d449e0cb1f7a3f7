"""Encoding throughput: embedforge against plain baselines, measured side by side in one run.

1. all-MiniLM-L6-v2: embedforge `load_encoder` vs plain `SentenceTransformer.encode` (wrapper overhead).
2. SmolLM2-135M: embedforge `Embedder.encode_documents` (bidirectional, mean pooling, length-sorted batches) vs a
   plain transformers forward + mean pool over the same texts in input order, same batch size and max length.
3. int8 dynamic quantization of the SmolLM2 embedder (NV-Embed A.3): speed-up over fp32 and cosine agreement.
Goal: >= 1.0x texts/s for (1) and (2). Systems run in alternating rounds and the best round counts, so a busy
machine slows all of them alike. Writes benchmarks/results/encode.json and encode.png.

    .venv/bin/python benchmarks/encode.py [--texts 256] [--batch-size 32] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_result

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder, load_encoder
from embedforge.model.quantize import cosine_agreement, quantize_int8
from embedforge.models.bundled import prepare
from embedforge.paths import data_dir

log = logging.getLogger("bench.encode")
RESULTS = Path(__file__).resolve().parent / "results"


def load_texts(n: int) -> list[str]:
    """The first `n` passages of the TREC DL subset (real text of varied length)."""
    path = data_dir() / "trec_dl_msmarco_subset" / "corpus.jsonl"
    texts = []
    with path.open() as f:
        for line in f:
            texts.append(json.loads(line)["text"])
            if len(texts) == n:
                break
    return texts


def plain_hf_mean_pool(model_dir: Path, max_length: int) -> Callable[[Sequence[str], int], np.ndarray]:
    """The baseline: transformers AutoModel forward, masked mean pool, L2 normalise, batches in input order."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval()

    @torch.inference_mode()
    def encode(texts: Sequence[str], batch_size: int) -> np.ndarray:
        out = []
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(
                list(texts[i : i + batch_size]),
                padding=True,
                truncation=True,
                max_length=max_length,
                return_tensors="pt",
            )
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).float()
            pooled = (hidden * mask).sum(1) / mask.sum(1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
        return np.concatenate(out)

    return encode


def time_rounds(systems: dict[str, Callable[[], np.ndarray]], rounds: int, n_texts: int) -> dict[str, dict]:
    """Run every system once per round, alternating; keep the best time of each and its last output."""
    best: dict[str, float] = {}
    outputs: dict[str, np.ndarray] = {}
    for r in range(rounds):
        for name, run in systems.items():
            started = time.perf_counter()
            outputs[name] = run()
            elapsed = time.perf_counter() - started
            best[name] = min(best.get(name, float("inf")), elapsed)
            log.info("round %d/%d %-28s %.2fs (%.1f texts/s)", r + 1, rounds, name, elapsed, n_texts / elapsed)
    return {
        name: {"seconds": best[name], "texts_per_s": n_texts / best[name], "output": outputs[name]} for name in systems
    }


def plot(figures: dict[str, float], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.5))
    names = list(figures)
    ax.barh(names, [figures[n] for n in names], color=["#4c72b0" if "embedforge" in n else "#999999" for n in names])
    ax.set_xlabel("texts / s (best round, higher is better)")
    ax.set_title("Encoding throughput, same texts, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-length", type=int, default=128)
    args = parser.parse_args(argv)
    from embedforge.logs import configure_logging

    configure_logging(fmt="%(asctime)s %(name)s %(message)s")
    logging.getLogger("embedforge.model.embedder").setLevel(logging.WARNING)
    torch.set_num_threads(args.threads)
    models = prepare(["all-minilm-l6-v2", "smollm2-135m-instruct"])
    texts = load_texts(args.texts)
    n, bs = len(texts), args.batch_size

    from sentence_transformers import SentenceTransformer

    st_plain = SentenceTransformer(str(models["all-minilm-l6-v2"]), device="cpu")
    st_ours = load_encoder("bundled:all-minilm-l6-v2")
    minilm = time_rounds(
        {
            "embedforge MiniLM": lambda: st_ours.encode_documents(texts, batch_size=bs),
            "sentence-transformers MiniLM": lambda: st_plain.encode(
                texts, batch_size=bs, normalize_embeddings=True, show_progress_bar=False
            ),
        },
        args.rounds,
        n,
    )

    config = ModelConfig(backbone="bundled:smollm2-135m-instruct", pooling="mean", max_doc_length=args.max_length)
    ours = load_embedder(config)
    int8 = quantize_int8(ours)
    plain = plain_hf_mean_pool(models["smollm2-135m-instruct"], args.max_length)
    smol = time_rounds(
        {
            "embedforge SmolLM2 fp32": lambda: ours.encode_documents(texts, batch_size=bs),
            "plain HF SmolLM2 mean pool": lambda: plain(texts, bs),
            "embedforge SmolLM2 int8": lambda: int8.encode_documents(texts, batch_size=bs),
        },
        args.rounds,
        n,
    )
    agreement = cosine_agreement(smol["embedforge SmolLM2 fp32"]["output"], smol["embedforge SmolLM2 int8"]["output"])
    truncated = ours.texts_truncated // args.rounds  # each round encodes every text once

    figures = {name: r["texts_per_s"] for name, r in {**minilm, **smol}.items()}
    ratios = {
        "embedforge_vs_sentence_transformers_minilm": figures["embedforge MiniLM"]
        / figures["sentence-transformers MiniLM"],
        "embedforge_vs_plain_hf_smollm2": figures["embedforge SmolLM2 fp32"] / figures["plain HF SmolLM2 mean pool"],
        "int8_vs_fp32_smollm2": figures["embedforge SmolLM2 int8"] / figures["embedforge SmolLM2 fp32"],
    }
    payload = {
        "benchmark": "encode",
        "machine": machine_info(),
        "settings": {
            "texts": n,
            "source": "trec_dl_msmarco_subset/corpus.jsonl (first passages)",
            "batch_size": bs,
            "rounds": args.rounds,
            "torch_threads": args.threads,
            "max_length": args.max_length,
            "texts_truncated_at_max_length": truncated,
        },
        "raw": {
            name: {"seconds": r["seconds"], "texts_per_s": r["texts_per_s"]} for name, r in {**minilm, **smol}.items()
        },
        "int8_cosine_agreement": agreement,
        "ratios": ratios,
        "goals": {
            "embedforge_vs_sentence_transformers_minilm": {
                "target": ">= 1.0",
                "met": ratios["embedforge_vs_sentence_transformers_minilm"] >= 1.0,
            },
            "embedforge_vs_plain_hf_smollm2": {
                "target": ">= 1.0",
                "met": ratios["embedforge_vs_plain_hf_smollm2"] >= 1.0,
            },
        },
    }
    plot(figures, RESULTS / "encode.png")
    write_result("encode", payload)
    print(json.dumps({"ratios": ratios, "int8_cosine_agreement": agreement, "goals": payload["goals"]}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
