"""OpenAI-style clients against the live deployment: the official `openai` client (same vectors as a direct encode,
usage, extensions), LangChain's `OpenAIEmbeddings` and LlamaIndex's `OpenAILikeEmbedding`, each configured as its
docs say for a non-OpenAI server."""

from __future__ import annotations

import asyncio
import json
import urllib.request
import warnings

import numpy as np
from openai import OpenAI

TEXTS = ["How do I bake sourdough bread?", "The mitochondria is the powerhouse of the cell.", "Ray Serve scales."]


def client(served) -> OpenAI:
    return OpenAI(base_url=f"{served.url}/v1", api_key=served.key, max_retries=0, timeout=60)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def assert_first_64_of_query(got: np.ndarray, direct_encoder) -> None:
    """`got` is TEXTS[0] embedded as a query with `dimensions=64`: the first 64 values of its full query vector."""
    full = direct_encoder.encode_queries([TEXTS[0]])[0]
    assert got.shape == (64,) and float(got @ (full[:64] / np.linalg.norm(full[:64]))) >= 0.999


def test_openai_client_matches_direct_encode(served, direct_encoder):
    resp = client(served).embeddings.create(model=served.model_name, input=TEXTS)  # base64 on the wire
    got = np.array([d.embedding for d in resp.data], dtype=np.float32)
    want = direct_encoder.encode_documents(TEXTS)
    assert got.shape == (3, 384)
    assert cosines(got, want).min() >= 0.999
    tokenizer = direct_encoder.tokenizer
    assert resp.usage.prompt_tokens == sum(len(tokenizer(t)["input_ids"]) for t in TEXTS)
    assert [d.index for d in resp.data] == [0, 1, 2]


def test_token_id_inputs_embed_as_the_text_they_encode(served, direct_encoder):
    """Token ids of the served model's own tokenizer, one sequence or several (as vLLM's OpenAI server takes them)."""
    ids = [direct_encoder.tokenizer(t, add_special_tokens=False)["input_ids"] for t in TEXTS]
    several = client(served).embeddings.create(model=served.model_name, input=ids)
    one = client(served).embeddings.create(model=served.model_name, input=ids[0])
    got = np.array([d.embedding for d in several.data], dtype=np.float32)
    want = direct_encoder.encode_documents(TEXTS)
    assert cosines(got, want).min() >= 0.999
    assert float(cosines(np.array([one.data[0].embedding], dtype=np.float32), want[:1])[0]) >= 0.999


def test_float_format_query_type_and_dimensions(served, direct_encoder):
    resp = client(served).embeddings.create(
        model=served.model_name,
        input=TEXTS[0],
        encoding_format="float",
        dimensions=64,
        extra_body={"input_type": "query"},
    )
    got = np.array(resp.data[0].embedding, dtype=np.float32)
    assert abs(float(np.linalg.norm(got)) - 1.0) < 1e-5
    assert_first_64_of_query(got, direct_encoder)


def langchain_embeddings(served, **settings):
    from langchain_openai import OpenAIEmbeddings

    # LangChain's settings for OpenAI-compatible servers: no tiktoken length check (it would tokenize with OpenAI's
    # vocabulary, and its encodings download at run time); the server truncates as it is told
    return OpenAIEmbeddings(
        model=served.model_name,
        base_url=f"{served.url}/v1",
        api_key=served.key,
        check_embedding_ctx_length=False,
        max_retries=0,
        **settings,
    )


def test_langchain_openai_embeddings_match_direct_encode(served, direct_encoder):
    embeddings = langchain_embeddings(served)
    docs = np.array(embeddings.embed_documents(TEXTS), dtype=np.float32)
    query = np.array([embeddings.embed_query(TEXTS[0])], dtype=np.float32)
    want = direct_encoder.encode_documents(TEXTS)
    assert docs.shape == (3, 384)
    assert cosines(docs, want).min() >= 0.999
    assert float(cosines(query, want[:1])[0]) >= 0.999
    short = langchain_embeddings(served, dimensions=64, model_kwargs={"extra_body": {"input_type": "query"}})
    got = np.asarray(short.embed_query(TEXTS[0]), dtype=np.float32)
    assert_first_64_of_query(got, direct_encoder)


def llama_index_embeddings(served, **settings):
    with warnings.catch_warnings():  # llama-index-core 0.12 declares a pydantic Field setting that pydantic 2.14 flags
        warnings.simplefilter("ignore")
        from llama_index.embeddings.openai_like import OpenAILikeEmbedding

    # LlamaIndex's class for OpenAI-compatible servers: any model name, the server's base URL and key
    return OpenAILikeEmbedding(
        model_name=served.model_name, api_base=f"{served.url}/v1", api_key=served.key, max_retries=0, **settings
    )


def test_llama_index_openai_like_embedding_matches_direct_encode(served, direct_encoder):
    embeddings = llama_index_embeddings(served, embed_batch_size=2)  # 3 texts: two requests
    docs = np.array(embeddings.get_text_embedding_batch(TEXTS), dtype=np.float32)
    query = np.array([embeddings.get_query_embedding(TEXTS[0])], dtype=np.float32)
    from_async = np.array(asyncio.run(embeddings.aget_text_embedding_batch(TEXTS)), dtype=np.float32)
    want = direct_encoder.encode_documents(TEXTS)
    assert docs.shape == (3, 384)
    assert cosines(docs, want).min() >= 0.999
    assert cosines(from_async, want).min() >= 0.999
    assert float(cosines(query, want[:1])[0]) >= 0.999
    short = llama_index_embeddings(served, dimensions=64, additional_kwargs={"extra_body": {"input_type": "query"}})
    got = np.asarray(short.get_query_embedding(TEXTS[0]), dtype=np.float32)
    assert_first_64_of_query(got, direct_encoder)


def test_models_health_ready(served):
    models = client(served).models.list()
    assert [m.id for m in models.data] == [served.model_name]
    for path, status in (("/health", "alive"), ("/ready", "ready")):
        with urllib.request.urlopen(served.url + path, timeout=30) as resp:
            assert resp.status == 200 and json.loads(resp.read())["status"] == status
