"""Pairwise teachers on real models: SmolLM2 scored pointwise by P("yes") and by query likelihood (UPR), and a
cross-encoder folder."""

from __future__ import annotations

import numpy as np
import pytest

from embedforge.config.mine import TeacherConfig
from embedforge.embeddings.cache import EmbeddingCache
from embedforge.mine.embed_stage import EmbedActor
from embedforge.mine.teachers.dense import SentenceTransformerTeacher, dense_identity
from embedforge.mine.teachers.pairwise import load_pair_scorer

PAIRS = [
    ("what is the capital of france", "Paris is the capital and largest city of France."),
    ("what is the capital of france", "The mitochondria is the powerhouse of the cell."),
    ("how many legs does a spider have", "Spiders have eight legs."),
    ("how many legs does a spider have", "The stock market fell sharply on Monday."),
]


def test_smollm2_pointwise_prefers_the_answering_document(smollm2_dir):
    scorer = load_pair_scorer(TeacherConfig(kind="llm_pointwise", model=str(smollm2_dir), batch_size=4))
    scores = scorer.score(PAIRS)
    assert scores.shape == (4,) and np.all((scores > 0) & (scores < 1))
    assert scores[0] > scores[1] and scores[2] > scores[3]
    np.testing.assert_allclose(scorer.score(PAIRS[:1]), scores[:1], rtol=1e-4)  # padding does not change it


def test_smollm2_query_likelihood_is_the_mean_log_probability_of_the_query(smollm2_dir):
    import torch

    scorer = load_pair_scorer(TeacherConfig(kind="llm_query_likelihood", model=str(smollm2_dir), batch_size=4))
    scores = scorer.score(PAIRS)
    assert scores.shape == (4,) and np.all(scores < 0)
    assert scores[0] > scores[1] and scores[2] > scores[3]
    # the batched, head-on-query-positions score equals the full forward pass of one unpadded sequence
    ids, query_len = scorer._sequence(*PAIRS[2])
    with torch.inference_mode():
        logprobs = scorer.model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)
    reference = np.mean([logprobs[t - 1, ids[t]].item() for t in range(len(ids) - query_len, len(ids))])
    assert scores[2] == pytest.approx(reference, abs=1e-4)


def test_query_likelihood_cuts_the_document_never_the_query(smollm2_dir):
    config = TeacherConfig(kind="llm_query_likelihood", model=str(smollm2_dir), max_length=48)
    assert config.prompt.endswith("{query}")  # the pointwise default became the UPR prompt
    scorer = load_pair_scorer(config)
    query = "how many legs does a spider have"
    ids, query_len = scorer._sequence(query, "Spiders have eight legs. " * 100)
    assert len(ids) == 48 and ids[-query_len:] == scorer._ids(query)
    with pytest.raises(ValueError, match="no room for the document"):
        scorer._sequence("spider " * 60, "Spiders have eight legs.")


def test_cross_encoder_folder_scores_pairs(minilm_dir):
    # MiniLM's encoder with a fresh one-logit head: a real CrossEncoder, here only for the plumbing
    scorer = load_pair_scorer(TeacherConfig(kind="cross_encoder", model=str(minilm_dir), batch_size=2))
    scores = scorer.score(PAIRS)
    assert scores.shape == (4,) and np.isfinite(scores).all()
    np.testing.assert_allclose(scorer.score(PAIRS), scores, rtol=1e-5)


def test_sentence_transformers_teacher_prefixes_and_symmetric_documents(minilm_dir):
    config = TeacherConfig(kind="sentence_transformers", model=str(minilm_dir), query_prefix="query: ")
    teacher = SentenceTransformerTeacher(config)
    texts = ["Spiders have eight legs."]
    as_query = teacher.encode_queries(texts)
    bare_doc = teacher.encode_documents(texts)
    symmetric_doc = teacher.encode_documents(texts, task="Retrieve semantically similar text.")
    assert as_query.shape == (1, teacher.dimension) and np.linalg.norm(as_query) == pytest.approx(1, abs=1e-5)
    np.testing.assert_allclose(symmetric_doc, as_query, atol=1e-6)
    assert float((bare_doc @ as_query.T)[0, 0]) < 0.9999
    assert dense_identity(config, "document", None) != dense_identity(config, "document", "Retrieve")


def test_sentence_transformers_teacher_encodes_bare_texts_unpadded_with_the_same_vectors(minilm_dir):
    """Texts without a prefix skip the padding tokens; the vectors are sentence-transformers' own, whatever the
    batch's lengths and the truncation at the teacher's max_length."""
    from sentence_transformers import SentenceTransformer

    config = TeacherConfig(kind="sentence_transformers", model=str(minilm_dir), max_length=12)
    teacher = SentenceTransformerTeacher(config)
    assert teacher.unpadded is not None
    texts = ["Spiders.", "Spiders have eight legs and most of them spin silk to build webs for their prey.", "Silk"]
    reference = SentenceTransformer(str(minilm_dir), device="cpu")
    reference.max_seq_length = 12
    expected = reference.encode(texts, batch_size=2, normalize_embeddings=True)
    np.testing.assert_allclose(teacher.encode_documents(texts, batch_size=2), expected, atol=1e-5)
    prefixed = SentenceTransformerTeacher(config.model_copy(update={"query_prefix": "query: "}))
    np.testing.assert_allclose(
        prefixed.encode_queries(texts),
        reference.encode(["query: " + t for t in texts], normalize_embeddings=True),
        atol=1e-5,
    )


def test_bfloat16_teacher_ranks_like_float32_and_caches_apart(minilm_dir):
    """`dtype: bfloat16` runs the sentence-transformers teacher (unpadded) and a cross-encoder in bf16: vectors
    within bf16 rounding of float32 ones, the same ranking, and cache names of their own (float32 keeps the name
    evaluation shares); `auto` on a CPU is float32."""
    import torch

    texts = [p[1] for p in PAIRS]
    exact = TeacherConfig(kind="sentence_transformers", model=str(minilm_dir))
    half = exact.model_copy(update={"dtype": "bfloat16"})
    fp32, bf16 = SentenceTransformerTeacher(exact), SentenceTransformerTeacher(half)
    assert bf16.unpadded is not None and {p.dtype for p in bf16.model.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in fp32.model.parameters()} == {torch.float32}
    a, b = fp32.encode_documents(texts), bf16.encode_documents(texts)
    assert b.dtype == np.float32 and np.linalg.norm(b, axis=1) == pytest.approx(1, abs=1e-5)
    assert np.all(np.sum(a * b, axis=1) > 0.99) and not np.allclose(a, b, atol=1e-5)
    query = [PAIRS[0][0]]
    assert np.argmax(fp32.encode_queries(query) @ a.T) == np.argmax(bf16.encode_queries(query) @ b.T) == 0
    assert dense_identity(half, "document", None) != dense_identity(exact, "document", None)
    explicit = exact.model_copy(update={"dtype": "float32"})
    assert dense_identity(explicit, "document", None) == dense_identity(exact, "document", None)
    on_gpu = exact.model_copy(update={"num_gpus": 1.0})
    assert dense_identity(on_gpu, "document", None) != dense_identity(exact, "document", None)  # half on a GPU

    cross = load_pair_scorer(TeacherConfig(kind="cross_encoder", model=str(minilm_dir), dtype="bfloat16"))
    assert {p.dtype for p in cross.model.parameters()} == {torch.bfloat16}
    scores = cross.score(PAIRS)
    assert scores.dtype == np.float32 and np.isfinite(scores).all()


def test_teacher_config_errors_name_the_problem():
    with pytest.raises(ValueError, match="needs a 'model'"):
        TeacherConfig(kind="cross_encoder")
    with pytest.raises(ValueError, match="takes no 'model'"):
        TeacherConfig(kind="bm25", model="x")
    with pytest.raises(ValueError, match="kind 'bm25' takes no 'dtype'"):
        TeacherConfig(kind="bm25", dtype="bfloat16")
    with pytest.raises(ValueError, match=r"model_settings\.dtype"):
        TeacherConfig(kind="embedforge", model="x", dtype="float16")
    with pytest.raises(ValueError, match="micro_batch_size applies to dense teachers only"):
        TeacherConfig(kind="cross_encoder", model="x", micro_batch_size=4)
    with pytest.raises(ValueError, match=r"\{query\} and \{document\}"):
        TeacherConfig(kind="llm_pointwise", model="x", prompt="no slots")
    with pytest.raises(ValueError, match=r"end with \{query\}"):
        TeacherConfig(kind="llm_query_likelihood", model="x", prompt="Q: {query}\nP: {document}")


def test_embed_actor_micro_batches_store_the_whole_batch_vectors(tmp_path):
    """The actor encodes its Ray Data batch in forward passes of micro_batch_size; the cached vectors equal the
    teacher's own encode of the whole batch."""
    texts = [f"{'short ' * (i % 5)}text number {i} about {'spiders ' * (i % 3)}" for i in range(11)]
    batch = {
        "text": np.array(texts, dtype=object),
        "side": np.array(["document"] * len(texts), dtype=object),
        "instruction": np.array([""] * len(texts), dtype=object),
        "instructed": np.zeros(len(texts), dtype=bool),
    }
    teacher = TeacherConfig(kind="sentence_transformers", model="bundled:all-minilm-l6-v2", micro_batch_size=3)
    actor = EmbedActor(teacher.model_dump(mode="json"), str(tmp_path))
    assert actor.forward_batch == 3
    out = actor(batch)
    assert out["encoded"].tolist() == [len(texts)] and out["rows"].tolist() == [len(texts)]
    cached = EmbeddingCache(str(tmp_path), dense_identity(teacher, "document", None)).get(texts)
    np.testing.assert_allclose(cached, actor.encoder.encode_documents(texts, batch_size=len(texts)), atol=1e-5)


def test_an_embedforge_teacher_scores_with_its_own_model_config(tiny_model_dir):
    """A causal last-token teacher (as e5-mistral is) scores exactly as the same model loaded directly with that
    config, not with the backbone's defaults (mean pooling, bidirectional attention)."""
    from embedforge.config.model import ModelConfig
    from embedforge.mine.teachers.dense import load_dense_teacher
    from embedforge.model import load_embedder

    own = {"pooling": "last", "bidirectional": False, "max_doc_length": 48}
    teacher = TeacherConfig(kind="embedforge", model=str(tiny_model_dir), model_settings=own)
    assert teacher.embedder_config.backbone == str(tiny_model_dir)
    assert TeacherConfig.model_validate(teacher.model_dump(mode="json")) == teacher  # as a Ray actor receives it
    direct = load_embedder(ModelConfig(backbone=str(tiny_model_dir), **own))
    texts = [document for _, document in PAIRS]
    scored = load_dense_teacher(teacher).encode_documents(texts)
    np.testing.assert_array_equal(scored, direct.encode_documents(texts))
    bare = load_dense_teacher(TeacherConfig(kind="embedforge", model=str(tiny_model_dir))).encode_documents(texts)
    assert not np.allclose(bare, scored, atol=1e-3)
    assert dense_identity(teacher, "document", None) != dense_identity(
        TeacherConfig(kind="embedforge", model=str(tiny_model_dir)), "document", None
    )


def test_teacher_model_settings_are_for_embedforge_teachers_and_its_own_model():
    with pytest.raises(ValueError, match="model_settings applies to kind 'embedforge' only"):
        TeacherConfig(kind="sentence_transformers", model="m", model_settings={"pooling": "last"})
    with pytest.raises(ValueError, match="differs from its model"):
        TeacherConfig(kind="embedforge", model="m", model_settings={"backbone": "other"})


def test_a_teacher_replaced_at_the_same_path_misses_the_embedding_cache(tmp_path, tiny_model_dir):
    """The cache identity carries the teacher's weights fingerprint, not only its path (stale vectors otherwise)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from embedforge.mine.teachers.dense import load_dense_teacher

    folder = tmp_path / "teacher"
    shutil.copytree(tiny_model_dir, folder)
    teacher = TeacherConfig(kind="embedforge", model=str(folder))
    texts = [document for _, document in PAIRS]
    cache = EmbeddingCache(str(tmp_path / "cache"), dense_identity(teacher, "document", None))
    cache.put(texts, load_dense_teacher(teacher).encode_documents(texts))
    assert cache.missing(texts) == []

    weights = next(folder.glob("*.safetensors"))
    state = load_file(weights)
    save_file({k: v + 0.01 * torch.randn_like(v) for k, v in state.items()}, weights, metadata={"format": "pt"})
    replaced = EmbeddingCache(str(tmp_path / "cache"), dense_identity(teacher, "document", None))
    assert replaced.missing(texts) == list(range(len(texts)))
    # the same folder untouched keeps its identity (a re-run reuses every vector)
    assert dense_identity(teacher, "document", None) == replaced.identity
