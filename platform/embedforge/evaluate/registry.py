"""Every evaluation task by name: the shared datasets, the user's custom tasks and the synthetic held-out set.

Shared datasets are read through `embedforge.data.shared` and evaluated on their held-out split where one
exists (training uses the train splits). NLI sets become pair classification (entailment 1 vs contradiction 0);
classification sets that ship as one file get a seeded train/test split; banking77 also backs a clustering task
(77 intents). Instructions default to NV-Embed Table 13 via the shared registry; `evaluate.instructions`
overrides any of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embedforge.config import EmbedforgeConfig
from embedforge.config.evaluate import HELDOUT_TASK, CustomTask, EvaluateConfig
from embedforge.data.beir import BeirDataset, read_beir
from embedforge.data.schema import LabelledText, NliPair, ScoredPair
from embedforge.data.shared import get_shared
from embedforge.evaluate import readers
from embedforge.evaluate.tasks import (
    ClassificationTask,
    ClusteringTask,
    PairClassificationTask,
    RerankingTask,
    RetrievalTask,
    STSTask,
    Task,
    split_train_test,
)
from embedforge.paths import data_dir, resolve_data_path

HELDOUT_INSTRUCTION = "Given a query, retrieve relevant passages that answer the query"
HELDOUT_TASK_FILE = "task.json"  # synth writes the instruction its queries were trained with beside the BEIR files


@dataclass(frozen=True)
class SharedTask:
    """How one shared dataset becomes a task: dataset, family, evaluation split and (classification) train split."""

    dataset: str
    family: str
    split: str
    train_split: str | None = None
    instruction: str | None = None  # None: the dataset's own (NV-Embed Table 13 style)
    samples_per_label: int = 8  # classification: MTEB's per-label draw for the dataset (its default 8)


SHARED_TASKS: dict[str, SharedTask] = {
    "stsb": SharedTask("stsb", "sts", "dev"),
    "sick": SharedTask("sick", "sts", "trial"),
    "sick_nli": SharedTask("sick_nli", "pair_classification", "trial"),
    "snli": SharedTask("snli", "pair_classification", "test"),
    "mrpc": SharedTask("mrpc", "pair_classification", "test"),
    "twitter_semeval2015": SharedTask("twitter_semeval2015", "pair_classification", "dev"),
    "banking77": SharedTask("banking77", "classification", "train"),
    "emotion": SharedTask("emotion", "classification", "val", train_split="train", samples_per_label=16),
    "tweet_sentiment_extraction": SharedTask(
        "tweet_sentiment_extraction", "classification", "train", samples_per_label=32
    ),
    "amazon_counterfactual": SharedTask(
        "amazon_counterfactual", "classification", "valid", train_split="train", samples_per_label=32
    ),
    "banking77_clustering": SharedTask(
        "banking77", "clustering", "train", instruction="Identify the intent of the given online banking query"
    ),
    "emotion_clustering": SharedTask(
        "emotion", "clustering", "val", instruction="Identify the emotion expressed in the given text"
    ),
    "wikiqa": SharedTask("wikiqa", "reranking", "dev"),
    "wikiqa_retrieval": SharedTask("wikiqa_retrieval", "retrieval", "all"),
    "trec_dl_msmarco_subset": SharedTask("trec_dl_msmarco_subset", "retrieval", "test"),
    "dbpedia_entity_subset": SharedTask("dbpedia_entity_subset", "retrieval", "test"),
}


IN_DISTRIBUTION = "in-distribution"
LEFT_OUT = "left out"
CONTAMINATED = "contaminated"  # scored units the run trained on (evaluate/contamination.py): never a real score


def task_provenance(name: str, config: EmbedforgeConfig) -> str:
    """Whether the run trained on the dataset a task is built from (`in-distribution`: another split of a training
    set, or the same file) or left it out (`left out`): generalisation is judged on left-out tasks only.

    The synthetic held-out slice is left out by construction (synth keeps its documents' queries out of training)."""
    if name == HELDOUT_TASK:
        return LEFT_OUT
    trained_folders = {get_shared(s.path).folder for s in config.data.sources if s.kind == "shared"}
    trained_paths = {str(resolve_data_path(s.path)) for s in config.data.sources if s.kind not in ("shared", "run")}
    # a file source inside a shared folder (e.g. a title_body source on a BEIR corpus) trained on that dataset too
    shared_root = data_dir().resolve()
    trained_folders |= {
        Path(p).relative_to(shared_root).parts[0] for p in trained_paths if Path(p).is_relative_to(shared_root)
    }
    if name in SHARED_TASKS:
        return IN_DISTRIBUTION if get_shared(SHARED_TASKS[name].dataset).folder in trained_folders else LEFT_OUT
    custom = {t.name: t for t in config.evaluate.custom_tasks}
    if name in custom and str(resolve_data_path(custom[name].path)) in trained_paths:
        return IN_DISTRIBUTION
    return LEFT_OUT


def available_tasks(config: EvaluateConfig, run_dir: Path | None = None) -> list[str]:
    """Names `tasks: [all]` expands to: shared, custom, and the held-out set when the run has one."""
    names = [*SHARED_TASKS, *(t.name for t in config.custom_tasks)]
    queries = heldout_dir(run_dir) / "queries.jsonl" if run_dir is not None else None
    if queries is not None and queries.is_file() and queries.stat().st_size > 0:
        names.append(HELDOUT_TASK)  # synth held some queries out (a run with no grounded queries has none)
    return names


def heldout_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "synth" / "heldout"


def selected_tasks(config: EvaluateConfig, run_dir: Path | None = None) -> list[str]:
    known = available_tasks(config, run_dir)
    guard = config.deploy_guard.task
    if guard != HELDOUT_TASK and guard not in known:
        raise ValueError(f"evaluate.deploy_guard.task: unknown task {guard!r}; known: {known}")
    if "all" in config.tasks:
        return known
    unknown = [n for n in config.tasks if n not in known and n != HELDOUT_TASK]
    if unknown:
        raise ValueError(f"evaluate.tasks: unknown task(s) {unknown}; known: {known}")
    for field_name in ("instructions", "demonstrations"):
        stray = sorted(n for n in getattr(config, field_name) if n not in known and n != HELDOUT_TASK)
        if stray:
            raise ValueError(f"evaluate.{field_name}: unknown task(s) {stray}; known: {known}")
    return list(config.tasks)


def build_task(name: str, config: EvaluateConfig, run_dir: Path | None = None) -> Task:
    """The full task `name` (not yet limited to max_examples_per_task)."""
    custom = {t.name: t for t in config.custom_tasks}
    if name in custom:
        task = _custom(custom[name], config)
    elif name in SHARED_TASKS:
        task = _shared(name, SHARED_TASKS[name], config)
    elif name == HELDOUT_TASK:
        if run_dir is None or not heldout_dir(run_dir).is_dir():
            raise FileNotFoundError(f"task {HELDOUT_TASK}: no synthetic held-out set at run_dir/synth/heldout")
        folder = heldout_dir(run_dir)
        spec = folder / HELDOUT_TASK_FILE
        instruction = json.loads(spec.read_text())["instruction"] if spec.is_file() else HELDOUT_INSTRUCTION
        task = _retrieval(name, read_beir(folder, _beir_split(folder)), instruction)
    else:
        raise ValueError(f"unknown task {name!r}")
    if name in config.instructions:
        task.instruction = config.instructions[name]
    task.demonstrations = [tuple(d) for d in config.demonstrations.get(name, [])]
    return task


def _beir_split(folder: Path) -> str:
    """A BEIR folder's split: `test` when present, else the only qrels file there is."""
    splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
    if "test" in splits or not splits:
        return "test"
    if len(splits) > 1:
        raise ValueError(f"{folder}/qrels has several splits {splits} and no 'test'")
    return splits[0]


def _shared(name: str, spec: SharedTask, config: EvaluateConfig) -> Task:
    dataset = get_shared(spec.dataset)
    records = dataset.read(spec.split)
    instruction = spec.instruction or dataset.instruction
    builders: dict[str, Callable[[], Task]] = {
        "sts": lambda: STSTask(name, instruction, pairs=records),
        "pair_classification": lambda: PairClassificationTask(name, instruction, pairs=_as_pairs(records)),
        "reranking": lambda: RerankingTask(name, instruction, groups=records),
        "retrieval": lambda: _retrieval(name, records, instruction),
        "clustering": lambda: ClusteringTask(name, instruction, texts=records),
        "classification": lambda: _classification(
            name,
            instruction,
            dataset.read(spec.train_split) if spec.train_split else None,
            records,
            config,
            spec.samples_per_label,
        ),
    }
    return builders[spec.family]()


def _as_pairs(records: list[ScoredPair] | list[NliPair]) -> list[ScoredPair]:
    """NLI pairs -> binary pairs: entailment 1, contradiction 0, neutral dropped."""
    if not records or isinstance(records[0], ScoredPair):
        return records
    label = {"entailment": 1.0, "contradiction": 0.0}
    return [ScoredPair(r.premise, r.hypothesis, label[r.label]) for r in records if r.label in label]


def _retrieval(name: str, beir: BeirDataset, instruction: str) -> RetrievalTask:
    qrels: dict[str, dict[str, float]] = {}
    for q in beir.qrels:
        qrels.setdefault(q.query_id, {})[q.doc_id] = q.relevance
    return RetrievalTask(name, instruction, corpus=beir.corpus, queries=beir.queries, qrels=qrels)


def _classification(
    name: str,
    instruction: str,
    train: list[LabelledText] | None,
    test: list[LabelledText],
    config: EvaluateConfig,
    samples_per_label: int,
) -> ClassificationTask:
    if train is None:
        train, test = split_train_test(test, config.test_fraction, config.seed)
    return ClassificationTask(
        name,
        instruction,
        train=train,
        test=test,
        samples_per_label=samples_per_label,
        experiments=config.classification_experiments,
    )


def _custom(spec: CustomTask, config: EvaluateConfig) -> Task:
    path = resolve_data_path(spec.path)
    instruction = spec.instruction or ""
    if spec.family == "retrieval":
        return _retrieval(spec.name, read_beir(path, spec.split), instruction)
    if spec.family == "reranking":
        return RerankingTask(spec.name, instruction, groups=readers.read_reranking_groups(path))
    if spec.family == "sts":
        return STSTask(spec.name, instruction, pairs=readers.read_scored_pairs(path))
    if spec.family == "pair_classification":
        return PairClassificationTask(spec.name, instruction, pairs=readers.read_scored_pairs(path))
    if spec.family == "clustering":
        return ClusteringTask(spec.name, instruction, texts=readers.read_labelled_texts(path))
    test = readers.read_labelled_texts(resolve_data_path(spec.test_path)) if spec.test_path else None
    texts = readers.read_labelled_texts(path)
    if test is None:
        return _classification(spec.name, instruction, None, texts, config, spec.samples_per_label)
    return _classification(spec.name, instruction, texts, test, config, spec.samples_per_label)
