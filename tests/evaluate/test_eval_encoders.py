"""The HTTP /v1/embeddings encoder against a real HTTP server, the embedding cache wrapper, model references."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from embedforge.config.model import LoraConfig
from embedforge.evaluate.cached import CachedEncoder, RecordingEncoder
from embedforge.evaluate.http_encoder import HTTPEncoder
from embedforge.evaluate.models import load_model, split_reference


@pytest.fixture(scope="module")
def tiny_encoder(tiny_model_dir):
    import torch

    torch.set_num_threads(1)
    return load_model("bundled:tiny-llama")


@pytest.fixture
def server(tiny_encoder):
    """A real HTTP server speaking /v1/embeddings with embedforge's input_type / instruction extensions."""
    seen: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({**body, "path": self.path, "auth": self.headers.get("Authorization")})
            if body["input"] == ["fail"]:
                self._send(422, {"error": {"message": "`input` rejected"}})
                return
            if body["input_type"] == "query":
                demos = [(d["query"], d["document"]) for d in body.get("demonstrations", [])]
                vectors = tiny_encoder.encode_queries(body["input"], task=body.get("instruction"), examples=demos)
            else:
                vectors = tiny_encoder.encode_documents(body["input"], task=body.get("instruction"))
            data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
            self._send(200, {"object": "list", "data": data[::-1], "model": "tiny"})  # any order: sorted by index

        def _send(self, status, payload):
            raw = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    httpd.shutdown()
    httpd.server_close()


def test_http_encoder_matches_the_model_it_serves(server, tiny_encoder):
    url, seen = server
    remote = HTTPEncoder(url, model="tiny", api_key="k")
    texts = ["a first text", "another one", "third"]
    q = remote.encode_queries(texts, task="Find it", batch_size=2)
    np.testing.assert_allclose(q, tiny_encoder.encode_queries(texts, task="Find it"), atol=1e-5)
    d = remote.encode_documents(texts)
    np.testing.assert_allclose(d, tiny_encoder.encode_documents(texts), atol=1e-5)
    assert remote.dimension == tiny_encoder.dimension
    first = seen[0]
    assert first["path"] == "/v1/embeddings" and first["input"] == texts[:2]
    assert first["input_type"] == "query" and first["instruction"] == "Find it" and first["model"] == "tiny"
    assert first["auth"] == "Bearer k"
    assert "instruction" not in seen[2] and seen[2]["input_type"] == "document"


def test_http_encoder_errors_are_clear(server):
    url, _ = server
    with pytest.raises(RuntimeError, match=r"answered HTTP 422: .*input` rejected"):
        HTTPEncoder(url + "/v1/embeddings").encode_documents(["fail"])
    with pytest.raises(ConnectionError, match=r"cannot reach http://127\.0\.0\.1:9/v1/embeddings"):
        HTTPEncoder("http://127.0.0.1:9").encode_documents(["x"])
    with pytest.raises(ValueError, match="needs an http"):
        HTTPEncoder("ftp://host")


def test_cached_encoder_reuses_vectors(tmp_path, tiny_encoder):
    cached = CachedEncoder(tiny_encoder, "bundled:tiny-llama", tmp_path)
    texts = ["alpha", "beta", "alpha", "gamma"]
    first = cached.encode_queries(texts, task="T")
    assert cached.misses == 3 and cached.hits == 0
    again = CachedEncoder(tiny_encoder, "bundled:tiny-llama", tmp_path).encode_queries(texts, task="T")
    np.testing.assert_array_equal(first, again)
    np.testing.assert_allclose(first, tiny_encoder.encode_queries(texts, task="T"), atol=1e-6)
    other_side = cached.encode_documents(["alpha"])  # a different side / instruction is a different key
    assert cached.misses == 4
    np.testing.assert_allclose(other_side, tiny_encoder.encode_documents(["alpha"]), atol=1e-6)


def test_recorded_vectors_seed_the_cache_under_their_side_task_and_demonstrations(tmp_path, tiny_encoder):
    """What checkpoint selection encoded with the model it keeps is read back by evaluation of that model, under
    the same side, instruction and demonstrations only, and as the model itself encodes it."""
    recording = RecordingEncoder(tiny_encoder)
    demos = [("a query", "its passage")]
    queries = recording.encode_queries(["alpha", "beta"], task="T", examples=demos)
    documents = recording.encode_documents(["gamma", "delta", "gamma"])
    recording.save(tmp_path / "recorded")
    cached = CachedEncoder(tiny_encoder, "bundled:tiny-llama", tmp_path / "cache")
    assert cached.seed(tmp_path / "recorded") == 4
    np.testing.assert_array_equal(cached.encode_queries(["beta", "alpha"], task="T", examples=demos), queries[::-1])
    np.testing.assert_array_equal(cached.encode_documents(["delta", "gamma"]), documents[1::-1])
    assert cached.hits == 4 and cached.misses == 0
    cached.encode_queries(["alpha"], task="T")  # without the demonstrations: another input, encoded
    cached.encode_queries(["alpha"], task="other", examples=demos)
    cached.encode_documents(["alpha"])
    assert cached.misses == 3
    np.testing.assert_allclose(
        queries, tiny_encoder.encode_queries(["alpha", "beta"], task="T", examples=demos), atol=1e-6
    )


def test_cached_encoder_keys_the_models_settings(tmp_path, tiny_encoder):
    """The same backbone under a run whose model section pools otherwise is another model (same reference, same
    name): its vectors never come from the first's cache."""
    texts = ["some words here", "other words"]
    CachedEncoder(tiny_encoder, "bundled:tiny-llama", tmp_path).encode_documents(texts)
    last_config = tiny_encoder.config.model_copy(update={"pooling": "last"})
    last = CachedEncoder(load_model("bundled:tiny-llama", last_config), "bundled:tiny-llama", tmp_path)
    assert last.name == tiny_encoder.name
    vectors = last.encode_documents(texts)
    assert last.misses == 2 and last.hits == 0
    np.testing.assert_allclose(vectors, last.encoder.encode_documents(texts), atol=1e-6)
    assert not np.allclose(vectors, tiny_encoder.encode_documents(texts))
    lora_config = tiny_encoder.config.model_copy(update={"lora": LoraConfig(r=4, top_layers=1)})
    other_lora = CachedEncoder(load_model("bundled:tiny-llama", lora_config), "bundled:tiny-llama", tmp_path)
    other_lora.encode_documents(texts)  # LoRA settings shape training only: the untrained backbone's vectors stand
    assert other_lora.hits == 2 and other_lora.misses == 0


def test_evaluation_reads_the_corpus_vectors_mining_wrote_with_the_same_model(tmp_path, minilm_dir):
    """All-MiniLM-L6-v2 as mining's teacher (no prefixes) and as evaluation's model encodes texts alike, so the
    vectors mining cached are evaluation's: read back, not encoded again, and equal to the model's own."""
    from embedforge.config.mine import TeacherConfig
    from embedforge.mine.embed_stage import EmbedActor

    ref = "bundled:all-minilm-l6-v2"
    texts = ["Spiders.", "Spiders have eight legs and most of them spin silk to build webs for their prey.", "Silk"]
    teacher = TeacherConfig(kind="sentence_transformers", model=ref)
    rows = {"text": np.array(texts * 2, dtype=object), "side": np.array(["document"] * 3 + ["query"] * 3, dtype=object)}
    batch = {**rows, "instruction": np.array([""] * 6, dtype=object), "instructed": np.zeros(6, dtype=bool)}
    assert EmbedActor(teacher.model_dump(mode="json"), str(tmp_path))(batch)["encoded"].tolist() == [6]

    model = load_model(ref)
    cached = CachedEncoder(model, ref, tmp_path)
    documents = cached.encode_documents(texts)
    queries = cached.encode_queries(texts, task="Given a question, retrieve passages that answer the question")
    assert cached.hits == 6 and cached.misses == 0
    np.testing.assert_allclose(documents, model.encode_documents(texts), atol=1e-5)
    np.testing.assert_allclose(queries, model.encode_queries(texts), atol=1e-5)
    # a teacher that prefixes its texts made other vectors: evaluation never reads them
    prefixed = TeacherConfig(kind="sentence_transformers", model=ref, document_prefix="passage: ")
    other = tmp_path / "prefixed"
    EmbedActor(prefixed.model_dump(mode="json"), str(other))(batch)
    again = CachedEncoder(model, ref, other)
    again.encode_documents(texts)
    assert again.hits == 0 and again.misses == 3


def test_cached_encoder_keys_the_model_not_its_name(tmp_path, tiny_encoder, tiny_model_dir):
    """A bidirectional run's starting model (`backbone?bidirectional=false`) and the same backbone under a causal
    run's settings are one model: the second reads the first's vectors. Options never hide the folder's
    fingerprint: a model replaced under the same reference is encoded again."""
    texts = ["some words here", "other words"]
    bidirectional_run = tiny_encoder.config.model_copy(update={"bidirectional": True})
    causal_run = tiny_encoder.config.model_copy(update={"bidirectional": False})
    ref = "bundled:tiny-llama?bidirectional=false"
    first = CachedEncoder(load_model(ref, bidirectional_run), ref, tmp_path)
    vectors = first.encode_documents(texts)
    assert first.misses == 2
    second = CachedEncoder(load_model("bundled:tiny-llama", causal_run), "bundled:tiny-llama", tmp_path)
    np.testing.assert_array_equal(second.encode_documents(texts), vectors)
    assert second.name != first.name and second.hits == 2 and second.misses == 0
    np.testing.assert_allclose(vectors, second.encoder.encode_documents(texts), atol=1e-6)  # the vectors it would make
    bidirectional = CachedEncoder(load_model("bundled:tiny-llama", bidirectional_run), "bundled:tiny-llama", tmp_path)
    bidirectional.encode_documents(texts)  # the other attention is another model
    assert bidirectional.misses == 2

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    copy_ref = f"{folder}?bidirectional=false"
    CachedEncoder(load_model(copy_ref, bidirectional_run), copy_ref, tmp_path / "cache").encode_documents(texts)
    config_file = folder / "config.json"
    config_file.write_text(config_file.read_text() + " ")  # the model at this path changed
    again = CachedEncoder(load_model(copy_ref, bidirectional_run), copy_ref, tmp_path / "cache")
    again.encode_documents(texts)
    assert again.misses == 2 and again.hits == 0


def test_model_reference_options(tiny_model_dir):
    assert split_reference("bundled:x?pooling=last&bidirectional=false") == (
        "bundled:x",
        {"pooling": "last", "bidirectional": False},
    )
    assert split_reference("http://h:1/v1/embeddings?x=1") == ("http://h:1/v1/embeddings?x=1", {})
    with pytest.raises(ValueError, match="option 'size=3' must be KEY=VALUE"):
        split_reference("bundled:x?size=3")
    with pytest.raises(ValueError, match="bidirectional must be true or false"):
        split_reference("bundled:x?bidirectional=yes")
    last = load_model("bundled:tiny-llama?pooling=last")
    assert last.name == "bundled:tiny-llama?pooling=last"
    assert not np.allclose(
        last.encode_documents(["some words here"]),
        load_model("bundled:tiny-llama").encode_documents(["some words here"]),
    )


def test_evaluation_demonstrations_reach_every_encoder_and_key_the_cache(tmp_path, tiny_encoder, server, shared_data):
    """LGAI 4.2 at evaluation: evaluate.demonstrations reach the task, every encoder kind renders them before the
    instruction, and cached vectors with and without them never mix."""
    from embedforge.config.evaluate import EvaluateConfig
    from embedforge.evaluate.registry import build_task, selected_tasks
    from embedforge.evaluate.scoring import score_task

    demos = [("a man is playing a guitar", "someone plays music")]
    config = EvaluateConfig(tasks=["stsb"], demonstrations={"stsb": demos})
    task = build_task("stsb", config).limit(12)
    assert task.demonstrations == demos and build_task("sick", config).demonstrations == []
    with pytest.raises(ValueError, match=r"evaluate.demonstrations: unknown task\(s\) \['stsbb'\]"):
        selected_tasks(EvaluateConfig(tasks=["stsb"], demonstrations={"stsbb": demos}))

    texts = ["a woman slices a tomato", "a dog runs"]
    with_demos = tiny_encoder.encode_queries(texts, task="T", examples=demos)
    assert float(with_demos[0] @ tiny_encoder.encode_queries(texts, task="T")[0]) < 0.9999
    url, seen = server
    np.testing.assert_allclose(HTTPEncoder(url).encode_queries(texts, task="T", examples=demos), with_demos, atol=1e-5)
    assert seen[-1]["demonstrations"] == [{"query": demos[0][0], "document": demos[0][1]}]
    cached = CachedEncoder(tiny_encoder, "bundled:tiny-llama", tmp_path)
    cached.encode_queries(texts, task="T")
    np.testing.assert_allclose(cached.encode_queries(texts, task="T", examples=demos), with_demos, atol=1e-6)
    assert cached.misses == 4  # the demonstrations are part of the cache key

    bare = score_task(build_task("stsb", EvaluateConfig()).limit(12), tiny_encoder)["main_score"]
    assert score_task(task, tiny_encoder)["main_score"] != bare


def test_retrieval_scores_equal_when_the_corpus_is_scored_block_by_block(tiny_encoder, shared_data, monkeypatch):
    from embedforge.config.evaluate import EvaluateConfig
    from embedforge.evaluate import scoring
    from embedforge.evaluate.registry import build_task

    task = build_task("trec_dl_msmarco_subset", EvaluateConfig()).limit(3, seed=0).limit_corpus(60, seed=0)
    whole = scoring.score_task(task, tiny_encoder)
    monkeypatch.setattr(scoring, "CORPUS_BLOCK", 7)
    blocked = scoring.score_task(task, tiny_encoder)
    assert blocked == pytest.approx(whole, abs=1e-9)
    assert whole["num_documents"] > 7
