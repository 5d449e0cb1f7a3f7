"""Turn any configured data source (`data.sources[]`) into training examples.

`kind` decides how: `shared` reads a shared dataset and applies the converter its family needs (recipe section 4);
`parquet` / `jsonl` read files already in the training-example schema; `beir` turns a BEIR folder's qrels into
graded retrieval examples; `title_body` turns a titled document collection into (title, text) retrieval pairs;
`cropped` cuts one query from each document of a collection (Contriever 3.1's random cropping); `run` reads an
earlier stage's output in the run directory; `documents` is a corpus for corpus-grounded synthesis, not training
data, and is refused here.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

from embedforge.config.data import DataSource
from embedforge.data.beir import read_beir
from embedforge.data.converters import (
    Converted,
    cropped_to_examples,
    groups_to_examples,
    labelled_to_examples,
    nli_to_examples,
    qrels_to_examples,
    similar_pairs_to_examples,
    title_body_to_examples,
)
from embedforge.data.documents import iter_documents
from embedforge.data.io import read_jsonl, read_parquet
from embedforge.data.schema import TrainingExample
from embedforge.data.shared import SharedDataset, get_shared
from embedforge.paths import resolve_data_path
from embedforge.runs.stage import read_manifest

OVER_MAX_EXAMPLES = "over max_examples"

log = logging.getLogger(__name__)

# the task type a family's examples get when the source does not set one
FAMILY_TASK_TYPES = {
    "sts": "sts",
    "pair": "pair",
    "nli": "retrieval",
    "classification": "classification",
    "reranking": "retrieval",
    "retrieval": "retrieval",
}
BEIR_INSTRUCTION = "Given a query, retrieve relevant passages that answer the query"
TITLE_BODY_INSTRUCTION = "Given a title, retrieve the passage it heads"
DEFAULT_NEGATIVES = DataSource.model_fields["negatives_per_example"].default


def convert_records(
    dataset: SharedDataset,
    records: Any,
    name: str,
    task_type: str | None = None,
    instruction: str | None = None,
    negatives_per_example: int = DEFAULT_NEGATIVES,
    seed: int = 0,
) -> Converted:
    """Apply the converter `dataset`'s family needs (recipe section 4) to records read from it."""
    task_type = task_type or FAMILY_TASK_TYPES[dataset.family]
    instruction = dataset.instruction if instruction is None else instruction
    if dataset.family == "sts":
        return similar_pairs_to_examples(records, name, instruction, task_type=task_type)
    if dataset.family == "pair":
        return similar_pairs_to_examples(records, name, instruction, threshold=1.0, task_type=task_type)
    if dataset.family == "nli":
        return nli_to_examples(records, name, instruction, task_type=task_type)
    if dataset.family == "classification":
        return labelled_to_examples(records, name, instruction, negatives_per_example, seed, task_type)
    if dataset.family == "reranking":
        return groups_to_examples(records, name, instruction, task_type=task_type)
    return qrels_to_examples(records, name, instruction, task_type=task_type)


def _convert_shared(source: DataSource, seed: int) -> Converted:
    dataset = get_shared(source.path)
    return convert_records(
        dataset,
        dataset.read(source.split),
        source.name,
        source.task_type,
        source.instruction,
        source.negatives_per_example,
        seed,
    )


def _relabel(source: DataSource, examples: list[TrainingExample]) -> Converted:
    """Examples already in the schema take the source's name, and its task type / instruction when set."""
    for ex in examples:
        ex.task_name = source.name
        if source.task_type is not None:
            ex.task_type = source.task_type
        if source.instruction is not None:
            ex.instruction = source.instruction
    return Converted(examples=examples)


def _run_output(source: DataSource, run_dir: Path | None) -> Path:
    if run_dir is None:
        raise ValueError(
            f"data source {source.name!r} (kind run) reads {source.path!r} from a run directory; none was given"
        )
    stage_dir = Path(run_dir) / source.path
    manifest = read_manifest(stage_dir)
    if manifest is None or manifest.get("status") != "complete":
        state = "missing" if manifest is None else manifest.get("status")
        raise FileNotFoundError(
            f"data source {source.name!r}: stage {source.path!r} output at {stage_dir} is not "
            f"complete ({state}); run `embedforge {source.path}` first"
        )
    return stage_dir / "data"


def convert_source(source: DataSource, run_dir: Path | None = None, seed: int = 0) -> Converted:
    """Examples of one source plus the counts of rows dropped on the way, by reason."""
    kind = source.kind
    if kind == "shared":
        converted = _convert_shared(source, seed)
    elif kind == "beir":
        beir = read_beir(resolve_data_path(source.path), source.split or "test")
        instruction = BEIR_INSTRUCTION if source.instruction is None else source.instruction
        converted = qrels_to_examples(beir, source.name, instruction, task_type=source.task_type or "retrieval")
    elif kind == "title_body":
        instruction = TITLE_BODY_INSTRUCTION if source.instruction is None else source.instruction
        documents = iter_documents(resolve_data_path(source.path))
        converted = title_body_to_examples(documents, source.name, instruction, source.task_type or "retrieval")
    elif kind == "cropped":
        instruction = BEIR_INSTRUCTION if source.instruction is None else source.instruction
        documents = iter_documents(resolve_data_path(source.path))
        converted = cropped_to_examples(
            documents, source.name, instruction, source.crop_words, seed, source.task_type or "retrieval"
        )
    elif kind == "parquet":
        converted = _relabel(source, read_parquet(resolve_data_path(source.path), TrainingExample))
    elif kind == "jsonl":
        converted = _relabel(source, read_jsonl(resolve_data_path(source.path), TrainingExample))
    elif kind == "run":
        converted = _relabel(source, read_parquet(_run_output(source, run_dir), TrainingExample))
    elif kind == "documents":
        raise ValueError(
            f"data source {source.name!r} has kind 'documents': a document collection feeds "
            "corpus-grounded synthesis (synth), it is not training examples; train on the synth "
            "stage's output with a source of kind 'run' instead"
        )
    else:
        raise ValueError(f"data source {source.name!r}: unknown kind {kind!r}")
    return _sample(source, converted, seed)


def _sample(source: DataSource, converted: Converted, seed: int) -> Converted:
    """At most `max_examples`, drawn with a seed fixed by (seed, source name), kept in their original order."""
    n, k = len(converted.examples), source.max_examples
    if k is None or n <= k:
        return converted
    keep = sorted(random.Random(f"{seed}:{source.name}").sample(range(n), k))
    converted.drop(OVER_MAX_EXAMPLES, n - k)
    converted.examples = [converted.examples[i] for i in keep]
    return converted


def load_source(source: DataSource, run_dir: Path | None = None, seed: int = 0) -> Converted:
    """The training examples of one configured source (the contract every stage codes against), with the rows
    dropped on the way counted by reason; `source_drops` names them for a stage manifest."""
    converted = convert_source(source, run_dir, seed)
    log.info(
        "source %s (%s %s): %d examples, dropped %s",
        source.name,
        source.kind,
        source.path,
        len(converted.examples),
        json.dumps(dict(converted.drops)) if converted.drops else "none",
    )
    return converted


def source_drops(source: DataSource, converted: Converted) -> dict[str, int]:
    """`source NAME: reason` -> count, for a stage manifest's drops (and so the run report): rows lost converting
    the source, and how many examples short of `max_examples` it came (a source smaller than requested)."""
    drops = {
        f"source {source.name}: {reason}": n
        for reason, n in converted.drops.items()
        if n and reason != OVER_MAX_EXAMPLES  # a sample the user asked for, not a loss
    }
    short = (source.max_examples or 0) - len(converted.examples)
    if short > 0:
        drops[f"source {source.name}: short of max_examples {source.max_examples}"] = short
    return drops
