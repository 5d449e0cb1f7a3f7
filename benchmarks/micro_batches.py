"""Forward-pass size on a CPU: one big forward against length-sorted micro-batches, side by side in one run.

The local profile sets `train.micro_batch_size: 8`, `evaluate.batch_size: 8` and a MiniLM teacher
`micro_batch_size: 16`. This measures what each buys on this machine, with the big forward as the baseline:
1. a LoRA training step of the local profile's SmolLM2 embedder (configs/local.yaml model section), forward and
   backward over 16 queries and 32 documents of real SNLI and WikiQA examples: one forward per side vs chunks of 8;
2. SmolLM2 inference on TREC DL passages: batches of 32 vs 8;
3. all-MiniLM-L6-v2 inference (the mining teacher) on TREC DL passages: batches of 64 vs 16.
Systems alternate round by round and the best round counts, so a busy host slows both alike. Also checks that
the micro-batched training step gives the same loss. Writes benchmarks/results/micro_batches.json.

    .venv/bin/python benchmarks/micro_batches.py [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_result
from encode import load_texts

from embedforge.config import load_config
from embedforge.data.sources import load_source
from embedforge.model import load_encoder
from embedforge.train.inputs import Encoder, TextInput
from embedforge.train.trainable import build_trainable

log = logging.getLogger("bench.micro_batches")
REPO = Path(__file__).resolve().parents[1]
QUERIES = 16


def training_batches(config, seed: int = 0) -> list[tuple[list[TextInput], list[TextInput]]]:
    """One SNLI and one WikiQA batch: 16 instructed queries, each with its positive and another's positive."""
    rng = random.Random(seed)
    batches = []
    for name in ("snli", "wikiqa"):
        [source] = [s for s in config.data.sources if s.name == name]
        examples = rng.sample(load_source(source), QUERIES * 2)
        queries = [TextInput(e.query, e.instruction, "query") for e in examples[:QUERIES]]
        documents = []
        for i, e in enumerate(examples[:QUERIES]):
            documents += [
                TextInput(e.positive, None, "document"),
                TextInput(examples[QUERIES + i].positive, None, "document"),
            ]
        batches.append((queries, documents))
    return batches


def train_step_seconds(encoder: Encoder, batches) -> tuple[float, float]:
    """Seconds per step (forward, InfoNCE over the batch's documents, backward) and the summed loss."""
    total_loss, started = 0.0, time.perf_counter()
    for queries, documents in batches:
        q, d = encoder(queries), encoder(documents)
        loss = torch.nn.functional.cross_entropy(q @ d.T / 0.05, torch.arange(len(q)) * 2)
        loss.backward()
        encoder.embedder.zero_grad(set_to_none=True)
        total_loss += float(loss)
    return (time.perf_counter() - started) / len(batches), total_loss


def best_of(rounds: int, systems: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Each system's best (lowest) seconds over `rounds` alternating rounds."""
    best = {name: float("inf") for name in systems}
    for r in range(rounds):
        for name, run in systems.items():
            seconds = run()
            best[name] = min(best[name], seconds)
            log.info("round %d %-24s %.2f s", r + 1, name, seconds)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--texts", type=int, default=96, help="TREC DL passages per inference round")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    torch.set_num_threads(args.threads)
    machine = machine_info()
    config = load_config(REPO / "configs" / "local.yaml")

    torch.manual_seed(0)
    embedder = build_trainable(config)
    embedder.train()
    batches = training_batches(config)
    whole, micro = Encoder(embedder), Encoder(embedder, micro_batch_size=8)
    losses: dict[str, float] = {}

    def step(name: str, encoder: Encoder) -> Callable[[], float]:
        def run() -> float:
            torch.manual_seed(1)  # the same LoRA dropout draws in both, as far as chunking allows
            seconds, losses[name] = train_step_seconds(encoder, batches)
            return seconds

        return run

    train = best_of(
        args.rounds, {"train: one forward": step("whole", whole), "train: chunks of 8": step("micro", micro)}
    )
    embedder.eval()
    embedder.requires_grad_(False)

    texts = load_texts(args.texts)
    smollm2 = load_encoder(config.model.backbone, config.model)
    minilm = load_encoder("bundled:all-minilm-l6-v2")

    def encode(encoder, batch_size: int) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            encoder.encode_documents(texts, batch_size=batch_size)
            return time.perf_counter() - started

        return run

    smol = best_of(args.rounds, {"SmolLM2 batch 32": encode(smollm2, 32), "SmolLM2 batch 8": encode(smollm2, 8)})
    mini = best_of(args.rounds + 2, {"MiniLM batch 64": encode(minilm, 64), "MiniLM batch 16": encode(minilm, 16)})

    ratios = {
        "train_step_speedup": train["train: one forward"] / train["train: chunks of 8"],
        "smollm2_encode_speedup": smol["SmolLM2 batch 32"] / smol["SmolLM2 batch 8"],
        "minilm_encode_speedup": mini["MiniLM batch 64"] / mini["MiniLM batch 16"],
    }
    payload = {
        "machine": machine,
        "settings": {"rounds": args.rounds, "threads": args.threads, "texts": args.texts, "queries": QUERIES},
        "seconds": {**train, **smol, **mini},
        "texts_per_s": {
            **{k: args.texts / v for k, v in smol.items()},
            **{k: args.texts / v for k, v in mini.items()},
        },
        "train_loss_whole_vs_micro": [losses["whole"], losses["micro"]],
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "goals": {k: ">= 1.0 (the local profile's setting is not slower than one big forward)" for k in ratios},
    }
    path = write_result("micro_batches", payload)
    for name, value in ratios.items():
        print(f"{name}: {value:.2f}x")
    print(f"train loss, one forward vs chunks: {losses['whole']:.4f} vs {losses['micro']:.4f}; wrote {path}")


if __name__ == "__main__":
    main()
