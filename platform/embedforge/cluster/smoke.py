"""The smoke job: proves the cluster path end to end on real shared data, in seconds.

Reads a shared dataset with its reader, hands the records to Ray Data, converts them to training examples with
`map_batches` (the family's converter, recipe section 4), and writes the result as `run_dir/smoke/` shards with a
manifest, resuming or skipping like every stage.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa

from embedforge.data.schema import TRAINING_EXAMPLE_SCHEMA, TrainingExample
from embedforge.data.shared import RECORD_TYPES, get_shared
from embedforge.data.sources import convert_records
from embedforge.runs.stage import StageRun, read_manifest

log = logging.getLogger(__name__)
STAGE = "smoke"


class _Convert:
    """map_batches function: a batch of reader records -> a table of training examples."""

    def __init__(self, dataset: str) -> None:
        self.dataset = get_shared(dataset)
        self.record_type = RECORD_TYPES[self.dataset.family]

    def __call__(self, batch: pa.Table) -> pa.Table:
        records = [self.record_type(**row) for row in batch.to_pylist()]
        converted = convert_records(self.dataset, records, f"smoke-{self.dataset.name}")
        return pa.Table.from_pylist([e.to_row() for e in converted.examples], schema=TRAINING_EXAMPLE_SCHEMA)


def run_smoke(
    run_dir: str | Path,
    dataset: str = "stsb",
    split: str | None = None,
    batch_size: int = 512,
    shard_size: int = 1000,
) -> dict:
    """Run the smoke conversion on the connected Ray cluster; returns the stage manifest. Duplicates are removed
    within a batch only: enough for a plumbing check, not for training data (use `load_source` for that)."""
    import ray

    from embedforge.cluster.local import connect

    shared = get_shared(dataset)
    if shared.family in ("retrieval", "classification"):
        raise ValueError(
            f"smoke job: dataset {dataset!r} ({shared.family}) does not convert batch by batch; "
            "pick an STS, pair, NLI or reranking dataset"
        )
    split = split or shared.default_split
    settings = {"dataset": dataset, "split": split, "batch_size": batch_size, "shard_size": shard_size}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    stage = StageRun(run_dir, STAGE, settings, config_hash=digest)
    if stage.is_complete():
        log.info("smoke: already complete at %s", stage.dir)
        return read_manifest(stage.dir) or {}
    stage.start()
    connect()
    started = time.time()
    records = shared.read(split)
    stage.time("read", time.time() - started)
    log.info("smoke: read %d %s records from %s/%s", len(records), shared.family, dataset, split)

    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True  # shard i is the same rows on every run: resumable
    items: list[dict[str, Any]] = [asdict(r) for r in records]
    ds = ray.data.from_items(items).map_batches(
        _Convert,
        fn_constructor_args=(dataset,),
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=1),
    )
    started = time.time()
    done, written = stage.done_shards(), 0
    for index, batch in enumerate(ds.iter_batches(batch_size=shard_size, batch_format="pyarrow")):
        if index in done:
            continue
        written += stage.write_shard(index, [TrainingExample.from_row(r) for r in batch.to_pylist()], TrainingExample)
    elapsed = time.time() - started
    stage.time("convert_and_write", elapsed)
    total = len(stage.read_all(TrainingExample))
    log.info(
        "smoke: %d examples (%d written now) in %.1fs, %.0f records/s",
        total,
        written,
        elapsed,
        len(records) / max(elapsed, 1e-9),
    )
    return stage.complete(
        counts={"records": len(records), "examples": total}, dataset=dataset, split=split, python=sys.executable
    )
