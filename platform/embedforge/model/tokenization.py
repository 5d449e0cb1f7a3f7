"""Turn (prefix, text) pairs into model inputs whose pooling mask leaves out the prefix (NV-Embed 4).

Each input is `[leading special tokens] + prefix tokens + text tokens + [EOS]`. Prefix and text are tokenized
separately, so the instruction length is exact and carried as data (a pooling mask), never found again by
searching the text. Leading specials (e.g. Llama/Mistral BOS) and the prefix are attended to but not pooled; the
EOS is pooled (it is the token that `last` pooling reads). Only the text is truncated, at `max_length` tokens in
all; the number of truncated inputs is counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase


@dataclass
class EncodedBatch:
    """Padded model inputs. `pool_mask` is 1 on real, non-instruction tokens; positions restart at each text."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    pool_mask: torch.Tensor
    position_ids: torch.Tensor
    num_truncated: int

    def to(self, device: torch.device | str) -> EncodedBatch:
        return EncodedBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.pool_mask.to(device),
            self.position_ids.to(device),
            self.num_truncated,
        )


def leading_special_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The special tokens the tokenizer puts before any text (BOS for Llama/Mistral, none for Qwen2/SmolLM2)."""
    ids = tokenizer("", add_special_tokens=True)["input_ids"]
    return [i for i in ids if i in set(tokenizer.all_special_ids)]


def closing_ids(tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """The special token every input ends with: EOS, when the tokenizer has one (read by `last` pooling)."""
    return [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []


def framing_tokens(tokenizer: PreTrainedTokenizerBase, prefix: str) -> int:
    """Tokens an input takes besides its text: the leading specials, the instruction prefix and the closing EOS.
    `max_length` minus this is the room `tokenize_pairs` leaves for the text."""
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    return len(leading_special_ids(tokenizer)) + len(prefix_ids) + len(closing_ids(tokenizer))


def tokenize_pairs(
    tokenizer: PreTrainedTokenizerBase,
    prefixes: Sequence[str],
    texts: Sequence[str],
    max_length: int,
    padding_side: str = "right",
) -> EncodedBatch:
    """Tokenize `prefixes[i] + texts[i]` for every i into one padded batch (see module docstring)."""
    if len(prefixes) != len(texts):
        raise ValueError(f"got {len(prefixes)} prefixes for {len(texts)} texts")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must be strings; item {bad[0]} is {type(texts[bad[0]]).__name__}")
    lead = leading_special_ids(tokenizer)
    tail = closing_ids(tokenizer)
    unique_prefixes = sorted(set(prefixes))
    prefix_ids = dict(
        zip(unique_prefixes, tokenizer(unique_prefixes, add_special_tokens=False)["input_ids"], strict=True)
    )
    text_ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
    rows: list[tuple[list[int], int]] = []
    truncated = 0
    for prefix, body in zip(prefixes, text_ids, strict=True):
        head = lead + prefix_ids[prefix]
        budget = max_length - len(head) - len(tail)
        if budget < 1:
            raise ValueError(
                f"the instruction prefix takes {len(head)} tokens, leaving no room for text within max_length="
                f"{max_length}: raise the maximum length or shorten the instruction / in-context examples"
            )
        if len(body) > budget:
            body = body[:budget]
            truncated += 1
        rows.append((head + body + tail, len(head)))
    width = max((len(ids) for ids, _ in rows), default=0)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    n = len(rows)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    pool = torch.zeros((n, width), dtype=torch.long)
    positions = torch.zeros((n, width), dtype=torch.long)
    for i, (ids, head_len) in enumerate(rows):
        start = 0 if padding_side == "right" else width - len(ids)
        span = slice(start, start + len(ids))
        input_ids[i, span] = torch.tensor(ids)
        attention[i, span] = 1
        pool[i, start + head_len : start + len(ids)] = 1
        positions[i, span] = torch.arange(len(ids))
    return EncodedBatch(input_ids, attention, pool, positions, truncated)
