"""A backbone folder with random weights in one of the shapes of `shapes/` (real architectures' config.json files):
what the GPU benchmark and the production profile's train check load. Nothing is downloaded and no weights
travel: the weights are drawn from the architecture's own initialisation (seeded) in bf16, on the GPU when there
is one, and saved as safetensors beside the bundled tiny-llama's tokenizer (SmolLM2's BPE; the real tokenizers do
not travel). The vocabulary is raised to the tokenizer's 49,152 where a shape's is smaller (all-MiniLM-L6-v2,
Mistral-7B): the embedding table is a lookup and adds no FLOPs.

    python benchmarks/gpu_bench/backbone.py mistral-7b-v0.1 /tmp/mistral-7b-random
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

SHAPES = Path(__file__).resolve().parent / "shapes"
COMPLETE = ".complete"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

log = logging.getLogger("bench.gpu.backbone")


def shape_config(shape: str) -> dict[str, Any]:
    """A shape's config.json as transformers reads it (the file's `_source` note left out)."""
    path = SHAPES / f"{shape}.json"
    if not path.is_file():
        known = sorted(p.stem for p in SHAPES.glob("*.json"))
        raise ValueError(f"unknown shape {shape!r}: one of {known}")
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def tokenizer_dir() -> Path:
    from embedforge.models.bundled import prepare

    return prepare(["tiny-llama"])["tiny-llama"]


def make_backbone(shape: str, out: Path, device: str = "cpu", seed: int = 0) -> Path:
    """The folder `out` for `shape` (made once: an existing complete folder of the same shape is kept)."""
    import torch
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    stamp = {"shape": shape, "seed": seed, "config": shape_config(shape)}
    if (out / COMPLETE).is_file() and json.loads((out / COMPLETE).read_text()) == stamp:
        return out
    shutil.rmtree(out, ignore_errors=True)
    source = tokenizer_dir()
    values = dict(stamp["config"])
    values["vocab_size"] = max(values["vocab_size"], len(AutoTokenizer.from_pretrained(source)))
    model_type = values.pop("model_type")
    values["architectures"] = [{"mistral": "MistralModel", "llama": "LlamaModel", "bert": "BertModel"}[model_type]]
    config = AutoConfig.for_model(model_type, **values)
    started = time.perf_counter()
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = AutoModel.from_config(config, dtype=torch.bfloat16)
    except (RuntimeError, ValueError) as err:  # drawn on the CPU instead: slower, the same kind of weights
        log.warning("%s: drawing the weights on %s failed (%s); drawing them on the CPU", shape, device, err)
        model = AutoModel.from_config(config, dtype=torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.cpu().save_pretrained(out)
    for name in TOKENIZER_FILES:
        shutil.copy2(source / name, out / name)
    (out / COMPLETE).write_text(json.dumps(stamp))
    log.info("%s: %.2fB random bf16 parameters in %s (%.0f s)", shape, params / 1e9, out, time.perf_counter() - started)
    del model
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shape", help=f"one of {sorted(p.stem for p in SHAPES.glob('*.json'))}")
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch

    try:
        make_backbone(args.shape, args.out, "cuda" if torch.cuda.is_available() else "cpu", args.seed)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "platform"))
    sys.exit(main())
