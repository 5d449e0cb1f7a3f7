"""BERT-family sentence-transformers models run on their real tokens only, padding left out.

A batch of texts is padded to its longest text, and every linear layer, layer norm and activation then computes
the padding too. For 12 random TREC DL passages (all-MiniLM-L6-v2's tokenizer, 28-199 tokens), only 59 % of the
padded positions are real tokens; the linear layers are most of the forward pass on CPU. Here the token-wise
layers run on the concatenated real tokens (a [tokens, hidden] matrix), and only attention sees the padded
[batch, heads, length, head_dim] layout it needs, scattered in and gathered out for each layer; on a GPU in half
precision attention too runs on the real tokens, per text (FlashAttention's varlen kernel, `packed.py`). The model's own
modules and weights compute every step (embeddings, query/key/value, output and feed-forward blocks), so the
result is the padded model's up to float rounding; the pooling (mean or CLS over the real tokens) is ST's.

Serving with one text per request is where padding hurts: the batch is whatever requests arrived together
(git log, 2026-11-24). Models this does not cover (another architecture, a prompt, relative positions,
max or weighted pooling) keep sentence-transformers' own `encode`.

`UnpaddedBertModel` is the BertModel part, which the embedder also uses at inference (an encoder backbone such as
all-MiniLM-L6-v2 fine-tuned by the documents profile, scored and served through embedforge): it returns
the padded last layer the model would, and embedforge's own pooling follows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from embedforge.model.packed import uses_flash, varlen_attention

POOLINGS = ("mean", "cls")
# A model in half precision computes its token-wise layers on a multiple of this many rows. oneDNN, which runs
# bf16 matmuls on a CPU, builds and caches a kernel for each new matrix shape: one per batch's token count, which
# took an all-MiniLM-L6-v2 teacher from ~0.8 to ~1.6 GiB over 38,752 texts and spent time building them (git log).
# Padding the rows to a bucket leaves a few dozen shapes. float32 matmuls take no such cache and get no padding.
HALF_PRECISION_ROWS = 64


def reproducible_bert(config: dict[str, Any]) -> bool:
    """Whether a config.json (as a dict) is a BERT encoder whose layers `UnpaddedBertModel` runs as the model does:
    absolute positions, no chunked feed-forward, no decoder or cross-attention."""
    return (
        config.get("model_type") == "bert"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and not config.get("chunk_size_feed_forward")
        and not config.get("is_decoder")
        and not config.get("add_cross_attention")
    )


class UnpaddedBertModel:
    """A Hugging Face BertModel's forward pass on the real tokens of a padded batch (inference only).

    The query, key and value weights are stacked into one matrix product per layer and the stack is kept while those
    six tensors stay the same objects, storage and version: weights loaded or changed after construction (a
    checkpoint being scored, an in-place update) are restacked at the next call, and serving one text per call does
    not copy them each time."""

    def __init__(self, bert: Any) -> None:
        self.bert = bert
        config = bert.config
        self.hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self._stacks: dict[int, tuple[list[tuple[torch.Tensor, int, int]], torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def supports(bert: Any) -> bool:
        """Whether `bert` is a model whose forward pass this reproduces exactly."""
        config = getattr(bert, "config", None)
        if config is None or not reproducible_bert(config.to_dict()):
            return False
        from transformers import PreTrainedModel

        if not isinstance(bert, PreTrainedModel) or not hasattr(bert, "embeddings"):  # a peft wrapper is neither
            return False
        # plain linear query / key / value (their weights are stacked): not LoRA-wrapped or int8-quantized ones
        attention = [layer.attention.self for layer in bert.encoder.layer]
        return all(type(m) is torch.nn.Linear for a in attention for m in (a.query, a.key, a.value))

    def real_token_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The last layer's states of the real tokens ([tokens, hidden]) and where each sits in the padded
        [batch * length] layout."""
        device = self.bert.device
        batch, length = input_ids.shape
        real = attention_mask.to(device).flatten().bool()
        rows = real.nonzero().squeeze(1)
        positions = torch.arange(length, device=device).repeat(batch)[rows]
        types = torch.zeros_like(positions) if token_type_ids is None else token_type_ids.to(device).flatten()[rows]
        hidden = self.bert.embeddings(
            input_ids=input_ids.to(device).flatten()[rows].unsqueeze(0),
            position_ids=positions.unsqueeze(0),
            token_type_ids=types.unsqueeze(0),
        ).squeeze(0)
        # a batch without padding (one text, or texts of one length) is its own layout: no mask, no scatter or gather
        dense = rows.numel() == batch * length
        tokens = rows.numel()
        extra = -tokens % HALF_PRECISION_ROWS if hidden.dtype != torch.float32 and device.type == "cpu" else 0
        if extra:  # rows of zeros up to a bucket's size; every token-wise layer computes each row alone
            hidden = F.pad(hidden, (0, 0, 0, extra))
        lengths = attention_mask.to(device).sum(dim=1)
        # on a GPU in half precision attention runs per text on the real tokens (FlashAttention's varlen kernel)
        varlen = uses_flash(hidden) and not dense
        cu_seqlens = F.pad(lengths.cumsum(0), (1, 0)).to(torch.int32) if varlen else None
        key_mask = None if dense or varlen else attention_mask.to(device).bool().view(batch, 1, 1, length)
        # the padded layout attention needs, zeros at padding (masked keys, values that must not be NaN), reused by
        # every layer, which overwrites the real tokens' rows only
        padded = None if dense or varlen else hidden.new_zeros(batch * length, 3 * self.hidden)
        for index, layer in enumerate(self.bert.encoder.layer):
            a = layer.attention.self
            weight, bias = self._stacked_qkv(index, a)
            if varlen:
                qkv = F.linear(hidden, weight, bias)[:tokens].view(tokens, 3, self.heads, self.head_dim)
                context = varlen_attention(
                    qkv[:, 0], qkv[:, 1], qkv[:, 2], cu_seqlens, int(lengths.max()), causal=False, scale=a.scaling
                ).reshape(tokens, self.hidden)
            else:
                if padded is None:
                    qkv = F.linear(hidden, weight, bias)[:tokens]
                else:
                    padded[rows] = F.linear(hidden, weight, bias)[:tokens]
                    qkv = padded
                query, key, value = qkv.view(batch, length, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
                context = F.scaled_dot_product_attention(query, key, value, attn_mask=key_mask, scale=a.scaling)
                context = context.transpose(1, 2).reshape(batch * length, self.hidden)
                if padded is not None:
                    context = context[rows]
            hidden = layer.attention.output(F.pad(context, (0, 0, 0, extra)) if extra else context, hidden)
            hidden = layer.output(layer.intermediate(hidden), hidden)
        return hidden[:tokens], rows

    def _stacked_qkv(self, index: int, attention: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer `index`'s query/key/value weights and biases stacked, restacked when any of them changed."""
        a = attention
        tensors = (a.query.weight, a.key.weight, a.value.weight, a.query.bias, a.key.bias, a.value.bias)
        if any(t.is_inference() for t in tensors):  # no version counter to tell an in-place change: stack each call
            return torch.cat(tensors[:3]), torch.cat(tensors[3:])
        # the cache holds the tensors themselves, so neither their identity nor their storage can be reused
        state = [(t, t.data_ptr(), t._version) for t in tensors]
        cached = self._stacks.get(index)
        if cached is None or any(
            t is not u or ptr != uptr or v != uv for (t, ptr, v), (u, uptr, uv) in zip(state, cached[0], strict=True)
        ):
            cached = (state, torch.cat(tensors[:3]), torch.cat(tensors[3:]))
            self._stacks[index] = cached
        return cached[1], cached[2]

    def last_hidden_state(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The padded [batch, length, hidden] last layer the model itself returns, zeros at padding positions
        (which every pooling leaves out)."""
        hidden, rows = self.real_token_states(input_ids, attention_mask)
        batch, length = input_ids.shape
        out = hidden.new_zeros(batch * length, self.hidden)
        out[rows] = hidden
        return out.view(batch, length, self.hidden)


class UnpaddedBert:
    """Encodes texts with a sentence-transformers [Transformer(BertModel), Pooling(mean|cls), Normalize?] model:
    `bert` (a BertModel, or `plain_bert.PlainBert`), `tokenize` (texts to the padded batch the Transformer module
    gives the model) and the pooling."""

    def __init__(self, bert: Any, tokenize: Callable[[list[str]], dict[str, torch.Tensor]], pooling: str) -> None:
        self.bert = bert
        self.model = UnpaddedBertModel(bert)
        self.tokenize = tokenize
        self.pooling = pooling

    @classmethod
    def of(cls, st_model: Any) -> UnpaddedBert | None:
        """The unpadded runner for the model, or None when the model is not one it reproduces exactly."""
        modules = [type(m).__name__ for m in st_model]
        if modules not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
            return None
        if getattr(st_model[1], "pooling_mode", None) not in POOLINGS:
            return None
        if not UnpaddedBertModel.supports(getattr(st_model[0], "auto_model", None)):
            return None
        return cls(st_model[0].auto_model, st_model.preprocess, st_model[1].pooling_mode)

    def encode(self, texts: Sequence[str], batch_size: int) -> np.ndarray:
        """L2-normalised embeddings, in the texts' order; batches of `batch_size` texts of similar length."""
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.model.hidden), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), batch_size):
                chunk = order[start : start + batch_size]
                features = self.tokenize([texts[i] for i in chunk])
                ids, mask = features["input_ids"], features["attention_mask"]
                out[chunk] = self.embed(ids, mask, features.get("token_type_ids"))
        return out

    def embed(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> np.ndarray:
        """Pooled, L2-normalised embeddings of a padded batch (as the tokenizer returns it), computed unpadded."""
        hidden, rows = self.model.real_token_states(input_ids, attention_mask, token_type_ids)
        hidden = hidden.float()  # a half-precision model's states are pooled in float32, as sentence-transformers does
        sequence = rows // input_ids.shape[1]
        if self.pooling == "cls":
            firsts = torch.ones_like(sequence, dtype=torch.bool)
            firsts[1:] = sequence[1:] != sequence[:-1]
            pooled = hidden[firsts]
        else:
            sums = hidden.new_zeros(input_ids.shape[0], hidden.shape[1]).index_add_(0, sequence, hidden)
            mask = attention_mask.to(hidden.device)
            pooled = sums / mask.sum(dim=1, keepdim=True).clamp(min=1).to(hidden.dtype)
        return F.normalize(pooled, dim=-1).cpu().numpy()
