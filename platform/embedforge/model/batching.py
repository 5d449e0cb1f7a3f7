"""Length-sorted batching: similar lengths share a batch, so little compute goes to padding; and batches prepared
ahead of the model on worker threads."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def budget_batches(lengths: Sequence[int], max_items: int | None, max_tokens: int | None = None) -> list[list[int]]:
    """Indexes grouped into batches, longest first (errors surface early): at most `max_items` each and, with
    `max_tokens`, at most that many padded tokens (items x the batch's longest); an item longer than the budget
    goes alone. Equal lengths keep their order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches:
            batch = batches[-1]
            fits = max_tokens is None or (len(batch) + 1) * lengths[batch[0]] <= max_tokens
            if (max_items is None or len(batch) < max_items) and fits:
                batch.append(i)
                continue
        batches.append([i])
    return batches


def length_sorted_batches(texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """Indices of `texts` grouped into batches of `batch_size`, longest texts (in characters) first."""
    return budget_batches([len(t) for t in texts], batch_size)


def prefetched(fn: Callable[[T], R], items: Sequence[T], workers: int) -> Iterator[R]:
    """`fn(item)` for each item, in order, computed up to `workers` items ahead on as many threads (tokenizers
    release the GIL, so tokenizing the next batches overlaps the model's work on this one); inline when
    `workers` is 0."""
    if workers < 1 or len(items) < 2:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prefetch") as pool:
        pending = deque(pool.submit(fn, item) for item in items[:workers])
        for item in items[workers:]:
            done = pending.popleft()
            pending.append(pool.submit(fn, item))
            yield done.result()
        while pending:
            yield pending.popleft().result()
