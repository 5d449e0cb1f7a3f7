"""Benchmark texts cut from real passages (the TREC DL subset) to chosen token lengths.

The passages are joined into one token stream; a text of n tokens is the next n tokens of it, decoded. Uniform
texts run past the maximum length, so the model sees exactly that many tokens (the production profile's 512); a
realistic mix draws its lengths from a range, so padding would cost what it costs on real corpora.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

from embedforge.paths import data_dir


def passages() -> list[str]:
    path = data_dir() / "trec_dl_msmarco_subset" / "corpus.jsonl"
    with path.open() as f:
        return [json.loads(line)["text"] for line in f]


class TextCutter:
    """Texts of given token lengths (in `tokenizer`'s tokens, before special tokens) from the passages' stream."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.stream = tokenizer(" ".join(passages()), add_special_tokens=False, verbose=False)["input_ids"]
        self.offset = 0

    def cut(self, lengths: Sequence[int]) -> list[str]:
        texts = []
        for n in lengths:
            if self.offset + n > len(self.stream):
                self.offset = 0
            texts.append(self.tokenizer.decode(self.stream[self.offset : self.offset + n]))
            self.offset += n
        return texts

    def uniform(self, count: int, length: int) -> list[str]:
        """`count` texts longer than `length` tokens (cut to `length` by truncation), a few tokens to spare."""
        return self.cut([length + 16] * count)

    def mixed(self, count: int, low: int, high: int, seed: int = 0) -> list[str]:
        """`count` texts of lengths drawn uniformly from [low, high] tokens."""
        rng = random.Random(seed)
        return self.cut([rng.randint(low, high) for _ in range(count)])
