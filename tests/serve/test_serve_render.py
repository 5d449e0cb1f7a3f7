"""Response vectors: float32 written as the shortest decimals that read back to the same float32, cut vectors too."""

from __future__ import annotations

import base64
import json

import numpy as np
import orjson

from embedforge.serve.service import _render


def test_floats_read_back_to_the_exact_float32_vector_and_base64_matches():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((3, 64)).astype(np.float32)
    cut = vectors[:, :16]  # what `dimensions` serves: rows of a slice are not contiguous
    for row in (vectors[1], cut[2]):
        body = orjson.dumps({"embedding": _render(row, "float")}, option=orjson.OPT_SERIALIZE_NUMPY)
        assert np.array_equal(np.asarray(json.loads(body)["embedding"], dtype=np.float32), row)
        decoded = np.frombuffer(base64.b64decode(_render(row, "base64")), dtype="<f4")
        assert np.array_equal(decoded, row)
    assert len(orjson.dumps(_render(vectors[0], "float"), option=orjson.OPT_SERIALIZE_NUMPY)) < len(
        json.dumps(vectors[0].tolist())
    )
