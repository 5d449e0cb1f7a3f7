"""Training's exports of a LoRA model: every format written on its own against every format from one merge.

The production profile's model (`configs/nv-embed-v2.yaml`: LoRA r16 on every linear layer, bidirectional, latent
attention with 512 latents, bf16) on a random-weight backbone of a real shape (`gpu_bench/shapes`), its adapters
moved off their initialisation. The end of training writes the `merged` and the `sentence_transformers` exports:

- `each_format` (the baseline): `export_embedder` once per format, each merging a copy of the model and writing its
  weights (the custom-module ST folder holds a full merged copy);
- `one_merge` (what `train/finish.py` runs): `export_every_format`, which folds the adapters in place once and
  hard-links the merged export's files into the ST folder.

Each runs in a process of its own (so its peak memory is its own), from a model loaded the same way; the
export's seconds, the process's peak resident memory above the loaded model, and the bytes the exports take on
disk (each file counted once however many links it has). Writes benchmarks/results/export.json.

    .venv/bin/python benchmarks/export.py [--shape smollm2-1.7b] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "platform"))

from common import RESULTS, machine_info, write_result  # noqa: E402

log = logging.getLogger("bench.export")
MODES = ("each_format", "one_merge")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux


def disk_bytes(directory: Path) -> int:
    """The bytes the files under `directory` take, each inode once."""
    seen: dict[tuple[int, int], int] = {}
    for path in directory.rglob("*"):
        if path.is_file():
            stat = path.stat()
            seen[(stat.st_dev, stat.st_ino)] = stat.st_size
    return sum(seen.values())


def trained_embedder(backbone: Path) -> Any:
    """The production profile's trainable model on `backbone`, its adapters moved off their zero start."""
    import torch

    from embedforge.config import load_config
    from embedforge.train.trainable import build_trainable

    config = load_config(ROOT / "configs" / "nv-embed-v2.yaml", [f"model.backbone={backbone}"])
    embedder = build_trainable(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in embedder.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)
    return embedder.eval()


def run_mode(mode: str, backbone: Path, out: Path) -> dict[str, Any]:
    """One mode in this process: load, export, measure."""
    from embedforge.model.export import export_embedder, export_every_format
    from embedforge.model.formats import EXPORT_FORMATS

    embedder = trained_embedder(backbone)
    loaded_rss = peak_rss_bytes()
    started = time.perf_counter()
    if mode == "each_format":
        for fmt in EXPORT_FORMATS:
            export_embedder(embedder, out / fmt, fmt)
    else:
        export_every_format(embedder, out)
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 2),
        "peak_rss_above_loaded_gib": round((peak_rss_bytes() - loaded_rss) / 1024**3, 2),
        "loaded_rss_gib": round(loaded_rss / 1024**3, 2),
        "disk_gb": round(disk_bytes(out) / 1e9, 3),
    }


def measure(mode: str, backbone: Path, work: Path) -> dict[str, Any]:
    out = work / mode
    shutil.rmtree(out, ignore_errors=True)
    result = work / f"{mode}.json"
    cmd = [sys.executable, __file__, "--mode", mode, "--backbone", str(backbone), "--out", str(out)]
    subprocess.run([*cmd, "--result", str(result)], check=True)
    row = json.loads(result.read_text())
    shutil.rmtree(out, ignore_errors=True)
    log.info("%s: %s", mode, row)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="smollm2-1.7b", help="a backbone shape of gpu_bench/shapes")
    parser.add_argument("--work", type=Path, help="where the backbone and the exports go (default: a temp dir)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where export.json goes")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--backbone", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.mode:
        args.result.write_text(json.dumps(run_mode(args.mode, args.backbone, args.out)))
        return 0
    from gpu_bench.backbone import make_backbone

    with tempfile.TemporaryDirectory(prefix="embedforge-export-") as tmp:
        work = args.work or Path(tmp)
        backbone = make_backbone(args.shape, work / args.shape)
        rows = {mode: measure(mode, backbone, work) for mode in MODES}
    base, ours = rows["each_format"], rows["one_merge"]
    payload = {
        "command": f"python benchmarks/export.py --shape {args.shape}",
        "shape": args.shape,
        "model": "configs/nv-embed-v2.yaml's model section, a random-weight backbone",
        "runs": rows,
        "ratios": {
            "seconds_one_merge_vs_each_format": round(ours["seconds"] / base["seconds"], 3),
            "disk_one_merge_vs_each_format": round(ours["disk_gb"] / base["disk_gb"], 3),
            "peak_memory_above_loaded_one_merge_vs_each_format": round(
                ours["peak_rss_above_loaded_gib"] / max(base["peak_rss_above_loaded_gib"], 1e-9), 3
            ),
        },
        "goals": {"disk_one_merge_vs_each_format": "<= 0.55", "seconds_one_merge_vs_each_format": "< 1"},
        "machine": machine_info(),
    }
    if args.results == RESULTS:
        path = write_result("export", payload)
    else:
        args.results.mkdir(parents=True, exist_ok=True)
        path = args.results / "export.json"
        path.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload["ratios"], indent=1))
    log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
