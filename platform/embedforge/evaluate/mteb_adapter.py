"""Let the `mteb` package (2.x) evaluate any embedforge `TextEncoder`, and turn local tasks into mteb tasks.

`MtebEncoder` implements mteb's encoder protocol (`encode(inputs, task_metadata=..., prompt_type=...)`): query
inputs get the task's instruction and go through `encode_queries`, document inputs go bare through
`encode_documents`, and inputs without a prompt type (STS, pair classification, classification, clustering:
the symmetric families) get the instruction too, the same rule as `embedforge.evaluate.scoring` (NV-Embed
section 4). `to_mteb_task` wraps a local STS, pair-classification or retrieval task as an in-memory mteb task,
so both implementations can be run on the same data with no download.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict
from mteb.abstasks.pair_classification import AbsTaskPairClassification
from mteb.abstasks.retrieval import AbsTaskRetrieval
from mteb.abstasks.retrieval_dataset_loaders import RetrievalSplitData
from mteb.abstasks.sts import AbsTaskSTS
from mteb.abstasks.task_metadata import TaskMetadata
from mteb.models.abs_encoder import AbsEncoder
from mteb.models.model_meta import ModelMeta, ScoringFunction
from mteb.types import PromptType

from embedforge.evaluate.tasks import PairClassificationTask, RetrievalTask, STSTask, Task
from embedforge.model.protocol import TextEncoder

# mteb's name for each family's main score, as our metric names map onto it
MTEB_MAIN_SCORE = {"sts": "cosine_spearman", "pair_classification": "similarity_ap", "retrieval": "ndcg_at_10"}


class MtebEncoder(AbsEncoder):
    """An embedforge encoder seen through mteb's encoder protocol. `instructions` maps mteb task names to
    instruction texts (NV-Embed Table 13); a task missing from it is encoded without instruction."""

    def __init__(self, encoder: TextEncoder, instructions: dict[str, str] | None = None, batch_size: int = 32):
        self.model = encoder
        self.instructions = dict(instructions or {})
        self.batch_size = batch_size
        self.mteb_model_meta = ModelMeta.create_empty(
            {
                "name": f"embedforge/{_safe(encoder.name)}",
                "revision": "local",
                "embed_dim": encoder.dimension,
                "similarity_fn_name": ScoringFunction.COSINE,
            }
        )

    def encode(
        self,
        inputs: Any,
        *,
        task_metadata: TaskMetadata,
        hf_split: str,
        hf_subset: str,
        prompt_type: PromptType | None = None,
        **kwargs: Any,
    ) -> np.ndarray:
        texts = [t for batch in inputs for t in batch["text"]]
        instruction = self.instructions.get(task_metadata.name)
        if prompt_type == PromptType.document:
            return self.model.encode_documents(texts, batch_size=self.batch_size)
        return self.model.encode_queries(texts, task=instruction, batch_size=self.batch_size)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[-80:] or "model"


def _metadata(task: Task, kind: str, main_score: str) -> TaskMetadata:
    return TaskMetadata(
        name=task.name,
        type=kind,
        main_score=main_score,
        description=f"embedforge local task {task.name}",
        reference="https://github.com/embeddings-benchmark/mteb",
        dataset={"path": f"local/{task.name}", "revision": "local"},
        category="t2t",
        eval_splits=["test"],
        eval_langs=["eng-Latn"],
        date=("2020-01-01", "2020-01-01"),
        dialect=[],
        domains=[],
        task_subtypes=[],
        license="not specified",
        annotations_creators="derived",
        modalities=["text"],
        sample_creation="found",
        bibtex_citation="",
    )


def to_mteb_task(task: Task) -> Any:
    """An mteb task holding `task`'s data in memory (STS, pair classification or retrieval)."""
    if isinstance(task, STSTask):
        return _sts(task)
    if isinstance(task, PairClassificationTask):
        return _pair_classification(task)
    if isinstance(task, RetrievalTask):
        return _retrieval(task)
    raise TypeError(f"no mteb conversion for {type(task).__name__} (supported: STS, pair classification, retrieval)")


def _sts(task: STSTask) -> Any:
    gold = [p.score for p in task.pairs]

    class LocalSTS(AbsTaskSTS):
        metadata = _metadata(task, "STS", MTEB_MAIN_SCORE["sts"])
        min_score, max_score = min(gold), max(gold)

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = DatasetDict(
                {
                    "test": Dataset.from_dict(
                        {
                            "sentence1": [p.text1 for p in task.pairs],
                            "sentence2": [p.text2 for p in task.pairs],
                            "score": gold,
                        }
                    )
                }
            )
            self.data_loaded = True

    return LocalSTS()


def _pair_classification(task: PairClassificationTask) -> Any:
    class LocalPairClassification(AbsTaskPairClassification):
        metadata = _metadata(task, "PairClassification", MTEB_MAIN_SCORE["pair_classification"])

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = DatasetDict(
                {
                    "test": Dataset.from_dict(
                        {
                            "sentence1": [p.text1 for p in task.pairs],
                            "sentence2": [p.text2 for p in task.pairs],
                            "labels": [int(p.score) for p in task.pairs],
                        }
                    )
                }
            )
            self.data_loaded = True

    return LocalPairClassification()


def _retrieval(task: RetrievalTask) -> Any:
    kept = {q.query_id for q in task.queries}

    class LocalRetrieval(AbsTaskRetrieval):
        metadata = _metadata(task, "Retrieval", MTEB_MAIN_SCORE["retrieval"])

        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            self.dataset = {
                "default": {
                    "test": RetrievalSplitData(
                        queries=Dataset.from_list([{"id": q.query_id, "text": q.text} for q in task.queries]),
                        corpus=Dataset.from_list(
                            [{"id": d.doc_id, "text": d.embedded_text, "title": ""} for d in task.corpus]
                        ),
                        relevant_docs={
                            q: {d: int(r) for d, r in docs.items()} for q, docs in task.qrels.items() if q in kept
                        },
                        top_ranked=None,
                    )
                }
            }
            self.data_loaded = True

    return LocalRetrieval()
