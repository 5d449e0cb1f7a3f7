"""A BERT-family sentence-transformers folder run without importing transformers or sentence-transformers.

Importing any transformers model class imports far more than a BERT forward pass needs: torch.distributed's
tensor parallelism (with sympy), torch._dynamo, scikit-learn (with scipy and pandas) and accelerate. In a process
that already holds torch that is about 320 MiB (all-MiniLM-L6-v2's teacher: 547 MiB of PSS after
`from transformers.models.bert.modeling_bert import BertModel`, 224 MiB with torch, tokenizers and safetensors
alone), paid by every teacher actor of a mining run (issue 24). Here the folder's safetensors weights load into
torch modules named and shaped as Hugging Face's BertModel's, its `tokenizer.json` into the `tokenizers` library
(which transformers' fast tokenizer wraps), and `unpadded.UnpaddedBertModel` runs the forward pass: the vectors
are the sentence-transformers model's own. Folders this does not reproduce exactly (another architecture or
activation, relative positions, a default prompt, weights not in safetensors) return None, and the caller loads
them with sentence-transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from embedforge.model.unpadded import POOLINGS, UnpaddedBert, reproducible_bert

SAFETENSORS = "model.safetensors"
TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class PlainBertConfig:
    """The config.json fields a BERT forward pass reads."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def supported(cls, config: dict[str, Any]) -> PlainBertConfig | None:
        """The config when it is a BERT encoder `UnpaddedBertModel` reproduces (`reproducible_bert`) with the exact
        GELU these modules compute, else None."""
        if not reproducible_bert(config) or config.get("hidden_act", "gelu") != "gelu":
            return None
        return cls(
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            num_hidden_layers=config["num_hidden_layers"],
            num_attention_heads=config["num_attention_heads"],
            intermediate_size=config["intermediate_size"],
            max_position_embeddings=config["max_position_embeddings"],
            type_vocab_size=config.get("type_vocab_size", 2),
            layer_norm_eps=config.get("layer_norm_eps", 1e-12),
        )


# Every module is built on the meta device, without memory or initialisation: `_load_weights` assigns the file's
# tensors. (nn.Embedding initialises even a meta weight, which imports sympy, ~70 MiB: it is given an empty one.)
def _linear(inputs: int, outputs: int) -> nn.Linear:
    return nn.Linear(inputs, outputs, device="meta")


def _embedding(rows: int, dim: int) -> nn.Embedding:
    return nn.Embedding(rows, dim, _weight=torch.empty((rows, dim), device="meta"))


def _layer_norm(c: PlainBertConfig) -> nn.LayerNorm:
    return nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps, device="meta")


class _Embeddings(nn.Module):
    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.word_embeddings = _embedding(c.vocab_size, c.hidden_size)
        self.position_embeddings = _embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type_embeddings = _embedding(c.type_vocab_size, c.hidden_size)
        self.LayerNorm = _layer_norm(c)

    def forward(
        self, input_ids: torch.Tensor, position_ids: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        # summed in BertEmbeddings' order, so half precision rounds alike
        hidden = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        return self.LayerNorm(hidden + self.position_embeddings(position_ids))


class _SelfAttention(nn.Module):
    """Query, key and value projections; `UnpaddedBertModel` stacks them and runs the attention."""

    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.query = _linear(c.hidden_size, c.hidden_size)
        self.key = _linear(c.hidden_size, c.hidden_size)
        self.value = _linear(c.hidden_size, c.hidden_size)
        self.scaling = (c.hidden_size // c.num_attention_heads) ** -0.5


class _Residual(nn.Module):
    """A projection added to the block's input, then layer-normalised (BertSelfOutput, BertOutput)."""

    def __init__(self, inputs: int, c: PlainBertConfig) -> None:
        super().__init__()
        self.dense = _linear(inputs, c.hidden_size)
        self.LayerNorm = _layer_norm(c)

    def forward(self, hidden: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(hidden) + residual)


class _Attention(nn.Module):
    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.self = _SelfAttention(c)
        self.output = _Residual(c.hidden_size, c)


class _Intermediate(nn.Module):
    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.dense = _linear(c.hidden_size, c.intermediate_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(hidden))


class _Layer(nn.Module):
    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.attention = _Attention(c)
        self.intermediate = _Intermediate(c)
        self.output = _Residual(c.intermediate_size, c)


class _Encoder(nn.Module):
    def __init__(self, c: PlainBertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))


class PlainBert(nn.Module):
    """BertModel's embeddings and encoder layers under BertModel's parameter names (inference only: no dropout,
    no pooler); `UnpaddedBertModel` runs it."""

    def __init__(self, config: PlainBertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = _Embeddings(config)
        self.encoder = _Encoder(config)

    @property
    def device(self) -> torch.device:
        return self.embeddings.word_embeddings.weight.device


def _load_weights(model: PlainBert, path: Path, dtype: torch.dtype, device: str) -> None:
    """The safetensors weights, each converted to `dtype` as it is read (never a float32 copy of the whole model),
    assigned to the modules; names with a `bert.` prefix (a BertFor... checkpoint) are accepted."""
    from safetensors import safe_open

    wanted = dict(model.state_dict())
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt", device="cpu") as f:
        for key in f.keys():  # noqa: SIM118 (a safetensors file is not a dict)
            name = key.removeprefix("bert.")
            if name in wanted:
                state[name] = f.get_tensor(key).to(device=device, dtype=dtype)
    missing = sorted(set(wanted) - set(state))
    if missing:
        raise ValueError(f"{path}: BERT weights missing {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    model.load_state_dict(state, assign=True)


def _tokenize_with(path: Path, max_length: int, lowercase: bool) -> Any:
    """A function from texts to the padded batch sentence-transformers' Transformer module gives the model:
    `input_ids`, `attention_mask` and `token_type_ids`, cut at `max_length` tokens (special tokens included)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_length)
    padding = tokenizer.padding or {}
    tokenizer.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"))

    def tokenize(texts: list[str]) -> dict[str, torch.Tensor]:
        encodings = tokenizer.encode_batch([t.lower() for t in texts] if lowercase else list(texts))
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
        }

    return tokenize


def load_plain_bert(path: Path, dtype: torch.dtype, device: str, max_length: int) -> UnpaddedBert | None:
    """The folder as an `UnpaddedBert` encoder, cut at `max_length` tokens or the folder's own limit when lower;
    None when it is not a [Transformer(BERT), Pooling(mean|cls), Normalize?] sentence-transformers folder with
    safetensors weights, a tokenizer.json and no default prompt."""
    from embedforge.model.backbone_spec import read_backbone_spec, read_json_object

    try:
        spec = read_backbone_spec(path)
    except (ValueError, FileNotFoundError):
        return None
    if spec.modules not in (("Transformer", "Pooling"), ("Transformer", "Pooling", "Normalize")) or spec.default_prompt:
        return None
    config = PlainBertConfig.supported(read_json_object(spec.weights / "config.json"))
    files = spec.weights / SAFETENSORS, spec.weights / TOKENIZER
    if config is None or spec.pooling not in POOLINGS or not all(f.is_file() for f in files):
        return None
    model = PlainBert(config)
    _load_weights(model, files[0], dtype, device)
    model.eval()
    limit = min(max_length, spec.max_seq_length or max_length, config.max_position_embeddings)
    lowercase = bool(read_json_object(spec.weights / "sentence_bert_config.json").get("do_lower_case"))
    return UnpaddedBert(model, _tokenize_with(files[1], limit, lowercase), spec.pooling)
