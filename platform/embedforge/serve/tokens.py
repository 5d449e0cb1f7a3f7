"""Token counts and the per-input token limit, with the served model's own tokenizer.

Counts include the special tokens the tokenizer adds (what `usage.prompt_tokens` reports); the instruction
prefix of queries is not billed. A too-long input is rejected with 413 unless the request asks for truncation
(TEI's `truncate` convention; `serve.limits.on_too_long` sets the default), and then cut at a token boundary
(character offsets from the fast tokenizer), its count in `usage` being what was embedded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from embedforge.serve.errors import APIError


class TokenLimiter:
    def __init__(self, tokenizer: Any, max_tokens: int) -> None:
        if not getattr(tokenizer, "is_fast", False):
            raise TypeError(f"serving needs a fast (Rust) tokenizer for offsets, got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self._specials = tokenizer.num_special_tokens_to_add(pair=False)
        if max_tokens <= self._specials:
            raise ValueError(
                f"max_tokens_per_input ({max_tokens}) leaves no room beside {self._specials} special tokens"
            )
        self.max_tokens = max_tokens

    def apply(self, texts: Sequence[str], truncate: bool) -> tuple[list[str], list[int]]:
        """The texts (cut when `truncate`, else a 413 for a too-long one) and each one's token count, special tokens
        included."""
        enc = self.tokenizer(
            list(texts),
            add_special_tokens=False,
            return_offsets_mapping=True,
            return_attention_mask=False,
            verbose=False,
        )
        out, counts = [], []
        for i, (text, offsets) in enumerate(zip(texts, enc["offset_mapping"], strict=True)):
            n = len(offsets) + self._specials
            if n > self.max_tokens:
                if not truncate:
                    where = f"input[{i}]" if len(texts) > 1 else "input"
                    raise APIError(
                        413,
                        f'`{where}` has {n} tokens, the limit is {self.max_tokens}; send "truncate": true to embed '
                        "its first tokens",
                        "input",
                    )
                keep = self.max_tokens - self._specials
                text, n = text[: offsets[keep - 1][1]], self.max_tokens
            out.append(text)
            counts.append(n)
        return out, counts
