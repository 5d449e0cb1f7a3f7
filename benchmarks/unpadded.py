"""all-MiniLM-L6-v2 without padding tokens (`embedforge.model.unpadded`) against sentence-transformers' `encode`.

The batches a server forms: groups of 1, 4, 12 and 64 random TREC DL passages (a dynamic batch at one text per
request is whatever requests arrived together, so its texts are of mixed length), each group encoded in one call
(length-sorted batches of 16 inside it, as the service's micro-batches), by sentence-transformers' `encode` (the
baseline) and by the unpadded path, alternating round by round; the best round counts. Also reports how far the two
embeddings are apart. Then the embedder (`Embedder`, which evaluation, checkpoint selection and serving use for an
encoder backbone; the documents profile's model settings) encodes 1,024 passages in evaluation's length-sorted
batches of 64, with the model's own padded forward (the baseline) and unpadded. Writes
benchmarks/results/unpadded.json.

    .venv/bin/python benchmarks/unpadded.py [--rounds 3] [--threads 2] [--groups 24]
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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_info, write_result
from encode import load_texts

from embedforge.model.unpadded import UnpaddedBert
from embedforge.models.bundled import prepare

log = logging.getLogger("bench.unpadded")
ROOT = Path(__file__).resolve().parents[1]
MICRO_BATCH = 16


def texts_per_s(encode: Callable[[list[str]], np.ndarray], groups: list[list[str]]) -> float:
    encode(groups[0])  # warm
    start = time.perf_counter()
    for group in groups:
        encode(group)
    return sum(len(g) for g in groups) / (time.perf_counter() - start)


def embedder_rates(texts: list[str], rounds: int) -> dict[str, float]:
    """Texts per second of the embedder over `texts`, padded and unpadded (best of `rounds`), and their gap."""
    from embedforge.config import load_config
    from embedforge.model import load_embedder

    embedder = load_embedder(load_config(ROOT / "configs" / "documents.yaml").model)
    vectors, best = {}, {"padded": 0.0, "unpadded": 0.0}
    for r in range(rounds):
        for name in best:
            embedder.unpadded_inference = name == "unpadded"
            start = time.perf_counter()
            vectors[name] = embedder.encode_documents(texts, batch_size=64)
            best[name] = max(best[name], len(texts) / (time.perf_counter() - start))
            log.info("round %d, embedder: %-8s %6.1f texts/s", r + 1, name, len(texts) / (time.perf_counter() - start))
    gap = float(np.abs(vectors["padded"] - vectors["unpadded"]).max())
    log.info("embedder: unpadded / padded = %.2fx", best["unpadded"] / best["padded"])
    return best | {"ratio": best["unpadded"] / best["padded"], "max_abs_difference": gap}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--groups", type=int, default=24, help="random groups per group size")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    torch.set_num_threads(args.threads)
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(prepare(["all-minilm-l6-v2"])["all-minilm-l6-v2"]), device="cpu")
    unpadded = UnpaddedBert.of(model)
    texts = load_texts(1024)
    systems = {
        "sentence_transformers": lambda g: model.encode(g, batch_size=MICRO_BATCH, normalize_embeddings=True),
        "unpadded": lambda g: unpadded.encode(g, MICRO_BATCH),
    }
    sample = texts[:64]
    gap = systems["sentence_transformers"](sample) - systems["unpadded"](sample)
    agreement = {"max_abs_difference": float(np.abs(gap).max())}
    rng = random.Random(0)
    results: dict[str, dict[str, float]] = {}
    for size in (1, 4, 12, 64):
        groups = [rng.sample(texts, size) for _ in range(max(args.groups * 12 // size, 4))]
        best = {name: 0.0 for name in systems}
        for r in range(args.rounds):
            for name, encode in systems.items():
                rate = texts_per_s(encode, groups)
                best[name] = max(best[name], rate)
                log.info("round %d, groups of %2d: %-21s %6.1f texts/s", r + 1, size, name, rate)
        results[f"groups of {size}"] = best | {"ratio": best["unpadded"] / best["sentence_transformers"]}
        log.info("groups of %d: unpadded / sentence-transformers = %.2fx", size, results[f"groups of {size}"]["ratio"])
    ratios = {f"texts_per_s_unpadded_vs_sentence_transformers @ {label}": r["ratio"] for label, r in results.items()}
    embedder = embedder_rates(texts, args.rounds)
    ratios["texts_per_s_embedder_unpadded_vs_padded @ batches of 64"] = embedder["ratio"]
    payload = {
        "benchmark": "unpadded",
        "machine": machine_info(),
        "setup": {"model": "all-minilm-l6-v2", "threads": args.threads, "micro_batch": MICRO_BATCH}
        | {"rounds": args.rounds, "groups_per_size": args.groups},
        "results": results | {"embedder, batches of 64": embedder},
        "agreement": agreement,
        "ratios": ratios,
        "goals": {key: ">= 1.0 (not slower than the padded baseline)" for key in ratios},
    }
    log.info("wrote %s", write_result("unpadded", payload))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
