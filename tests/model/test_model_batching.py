"""Batching for inference and GradCache: length-sorted batches within a token budget, and batches tokenized ahead
on threads (the GPU path) giving the same vectors as tokenizing inline."""

from __future__ import annotations

import threading
import time

import numpy as np

from embedforge.config.model import ModelConfig
from embedforge.model import load_embedder
from embedforge.model.batching import budget_batches, length_sorted_batches, prefetched
from embedforge.model.embedder import TOKENIZER_THREADS


def test_budget_batches_go_longest_first_within_the_token_budget():
    lengths = [3, 10, 2, 7, 7, 1, 30]
    assert budget_batches(lengths, 3) == [[6, 1, 3], [4, 0, 2], [5]]
    # 30 tokens go alone; then 10 + 7 padded to 10 = 20 tokens; 7 x 3 = 21 is over; 2 x 2 = 4
    assert budget_batches(lengths, 3, max_tokens=20) == [[6], [1, 3], [4, 0], [2, 5]]
    assert budget_batches(lengths, None, max_tokens=21) == [[6], [1, 3], [4, 0, 2], [5]]
    assert sorted(i for b in budget_batches(lengths, 2, 8) for i in b) == list(range(len(lengths)))
    assert length_sorted_batches(["bb", "a", "ccc", "dd"], 2) == [[2, 0], [3, 1]]  # ties keep their order


def test_prefetched_keeps_order_and_runs_ahead_on_threads():
    seen = []

    def slow(x: int) -> int:
        seen.append(threading.current_thread().name)
        time.sleep(0.01 * (5 - x))  # later items finish first
        return x * x

    assert list(prefetched(slow, list(range(6)), workers=3)) == [0, 1, 4, 9, 16, 25]
    assert all(name.startswith("prefetch") for name in seen)
    assert list(prefetched(slow, [1, 2], workers=0)) == [1, 4]


def test_threaded_tokenization_gives_the_inline_vectors(tiny_model_dir, monkeypatch):
    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir)))
    texts = [f"text number {i} " + "word " * (i % 7) for i in range(40)]
    inline = embedder.encode_documents(texts, batch_size=4)
    counted = embedder.texts_encoded
    plan = embedder.batch_plan
    monkeypatch.setattr(embedder, "batch_plan", lambda *a: (plan(*a)[0], 3))  # as on a GPU: 3 threads tokenize ahead
    threaded = embedder.encode_documents(texts, batch_size=4)
    assert np.array_equal(inline, threaded)
    assert embedder.texts_encoded == 2 * counted
    assert embedder._spare_tokenizers.qsize() == TOKENIZER_THREADS  # every copy back in the pool
