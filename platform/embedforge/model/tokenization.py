"""Turn (prefix, text) pairs into model inputs whose pooling mask leaves out the prefix (NV-Embed 4).

Each input is `[leading special tokens] + prefix tokens + text tokens + [closing special tokens]`: the tokenizer's
own frame (`[CLS] ... [SEP]` for BERT-family encoders, a BOS for Llama/Mistral) and, when it closes with nothing,
EOS (the token that `last` pooling reads). Prefix and text are tokenized separately, so the instruction length is
exact and carried as data (a pooling mask), never found again by searching the text. With `pool_all=False`
(NV-Embed) leading specials and the prefix are attended to but not pooled, the closing token is pooled; with
`pool_all=True` (sentence-transformers' default) every real token is. Only the text is truncated, at `max_length`
tokens in all; the number of truncated inputs is counted.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
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


PROBE = "a"


def special_frame(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    """(leading, closing) special tokens of every input. Leading: what the tokenizer puts before a text (BOS for
    Llama/Mistral, [CLS] for BERT, none for Qwen2/SmolLM2). Closing: what it puts after ([SEP] for BERT), else EOS
    when it has one (decoders; the token `last` pooling reads)."""
    plain = tokenizer(PROBE, add_special_tokens=False)["input_ids"]
    full = tokenizer(PROBE, add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            lead, tail = full[:start], full[start + len(plain) :]
            if not tail and tokenizer.eos_token_id is not None:
                tail = [tokenizer.eos_token_id]
            return lead, tail
    raise ValueError(f"{type(tokenizer).__name__} does not keep a text's tokens when it adds its special tokens")


def framing_tokens(tokenizer: PreTrainedTokenizerBase, prefix: str) -> int:
    """Tokens an input takes besides its text: the leading specials, the instruction prefix and the closing EOS.
    `max_length` minus this is the room `tokenize_pairs` leaves for the text."""
    prefix_ids = tokenizer(prefix, add_special_tokens=False)["input_ids"]
    lead, tail = special_frame(tokenizer)
    return len(lead) + len(prefix_ids) + len(tail)


def tokenize_pairs(
    tokenizer: PreTrainedTokenizerBase,
    prefixes: Sequence[str],
    texts: Sequence[str],
    max_length: int,
    padding_side: str = "right",
    pool_all: bool = False,
) -> EncodedBatch:
    """Tokenize `prefixes[i] + texts[i]` for every i into one padded batch (see module docstring)."""
    if len(prefixes) != len(texts):
        raise ValueError(f"got {len(prefixes)} prefixes for {len(texts)} texts")
    if padding_side not in ("left", "right"):
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise TypeError(f"texts must be strings; item {bad[0]} is {type(texts[bad[0]]).__name__}")
    lead, tail = special_frame(tokenizer)
    unique_prefixes = sorted(set(prefixes))
    prefix_ids = dict(zip(unique_prefixes, token_ids(tokenizer, unique_prefixes), strict=True))
    rows: list[list[int]] = []
    heads: list[int] = []
    truncated = 0
    for prefix, body in zip(prefixes, token_ids(tokenizer, texts), strict=True):
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
        rows.append(head + body + tail)
        heads.append(len(head))
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max()) if len(rows) else 0
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    columns = np.arange(width)
    # each row's real tokens: the first `length` columns (right padding) or the last (left padding)
    real = columns < lengths[:, None] if padding_side == "right" else columns >= width - lengths[:, None]
    input_ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    input_ids[real] = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum()))
    positions = np.where(real, np.cumsum(real, axis=1) - 1, 0)
    first_pooled = 0 if pool_all else np.asarray(heads, dtype=np.int64)[:, None]
    pool = real & (positions >= first_pooled)
    as_long = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    return EncodedBatch(as_long(input_ids), as_long(real), as_long(pool), as_long(positions), truncated)


def token_ids(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """Each text's token ids without special tokens. A fast tokenizer's Rust backend encodes them directly (the
    transformers wrapper's per-text Python bookkeeping, under the GIL, was most of the cost on a GPU host whose
    threads tokenize ahead); its truncation and padding are switched off first, as the wrapper does."""
    if not texts:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    if backend.truncation is not None:
        backend.no_truncation()
    if backend.padding is not None:
        backend.no_padding()
    return [encoding.ids for encoding in backend.encode_batch(list(texts), add_special_tokens=False)]
