"""Instruction rendering, in-context examples, pooling masks and truncation counting on the real tokenizer."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from embedforge.config.model import InstructionConfig, ModelConfig
from embedforge.model import load_embedder
from embedforge.model.attention_capture import LastLayerAttention
from embedforge.model.backbone import load_tokenizer
from embedforge.model.instructions import render_prefix
from embedforge.model.tokenization import framing_tokens, tokenize_pairs


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


@pytest.fixture(scope="module")
def embedder(tiny_model_dir):
    return load_embedder(ModelConfig(backbone=str(tiny_model_dir), max_query_length=24, max_doc_length=12))


def test_render_prefix_with_task_default_and_examples():
    cfg = InstructionConfig()
    assert render_prefix(cfg, "Find answers") == "Instruct: Find answers\nQuery: "
    assert render_prefix(cfg, None) == f"Instruct: {cfg.default_task}\nQuery: "
    demo = render_prefix(cfg, "T", [("q1", "p1"), ("q2", "p2")])
    assert demo == "Query: q1\nResponse: p1\n\nQuery: q2\nResponse: p2\n\nInstruct: T\nQuery: "


def test_template_without_task_is_a_fixed_prefix_and_unknown_fields_are_rejected():
    fixed = InstructionConfig(query_template="query: ", document_prefix="passage: ")  # e5's prefixes
    assert render_prefix(fixed, "any task") == render_prefix(fixed, None) == "query: "
    assert render_prefix(InstructionConfig(query_template=""), "any task") == ""
    with pytest.raises(ValueError, match="may only use"):
        InstructionConfig(query_template="Instruct: {topic}\nQuery: ")


def test_pool_mask_excludes_exactly_the_prefix(tokenizer):
    prefix, text = "Instruct: find\nQuery: ", "hello world"
    batch = tokenize_pairs(tokenizer, [prefix, ""], [text, text], max_length=64)
    n_prefix = len(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    n_text = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert batch.attention_mask[0].sum() == n_prefix + n_text + 1  # + EOS
    assert batch.pool_mask[0].tolist()[:n_prefix] == [0] * n_prefix
    assert batch.pool_mask[0].sum() == n_text + 1
    assert torch.equal(batch.pool_mask[1][: n_text + 1], torch.ones(n_text + 1, dtype=torch.long))
    assert batch.input_ids[0, n_prefix + n_text] == tokenizer.eos_token_id


def test_framing_tokens_is_what_an_input_takes_besides_its_text(tokenizer):
    prefix = "Instruct: find\nQuery: "
    frame = framing_tokens(tokenizer, prefix)
    assert frame == len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) + 1  # + EOS; no BOS here
    batch = tokenize_pairs(tokenizer, [prefix], ["word " * 50], max_length=frame + 3)
    assert batch.attention_mask[0].sum() == frame + 3 and batch.num_truncated == 1
    assert batch.pool_mask[0].sum() == 3 + 1  # three text tokens and the EOS
    with pytest.raises(ValueError, match="leaving no room for text"):
        tokenize_pairs(tokenizer, [prefix], ["word"], max_length=frame)


def test_left_padding_keeps_positions_per_text(tokenizer):
    batch = tokenize_pairs(tokenizer, ["", ""], ["a", "a b c d e f"], max_length=64, padding_side="left")
    assert batch.attention_mask[0, 0] == 0 and batch.attention_mask[0, -1] == 1
    real = batch.attention_mask[0].bool()
    assert batch.position_ids[0][real].tolist() == list(range(int(real.sum())))


def test_truncation_cuts_text_only_and_is_counted(embedder):
    before = embedder.texts_truncated
    long_text = "word " * 100
    batch = embedder.tokenize([long_text, "short"], task="Find it", kind="query")
    assert batch.num_truncated == 1 and embedder.texts_truncated == before + 1
    assert batch.attention_mask[0].sum() == 24
    assert batch.input_ids[0, 23] == embedder.tokenizer.eos_token_id
    docs = embedder.tokenize([long_text], kind="document")
    assert docs.attention_mask.sum() == 12  # documents use max_doc_length


def test_prefix_longer_than_maximum_is_a_clear_error(embedder):
    with pytest.raises(ValueError, match="leaving no room for text"):
        embedder.tokenize(["x"], task="a very long instruction " * 10, kind="query")


def test_queries_instructed_documents_bare_symmetric_both(embedder):
    assert embedder.prefixes(1, "query", "T") == ["Instruct: T\nQuery: "]
    assert embedder.prefixes(1, "document") == [""]
    assert embedder.prefixes(1, "document", "T") == ["Instruct: T\nQuery: "]
    assert embedder.prefixes(2, "query", ["A", "B"])[1] == "Instruct: B\nQuery: "
    text = ["the same text"]
    query, doc = embedder.encode_queries(text, task="T"), embedder.encode_documents(text)
    assert float(query[0] @ doc[0]) < 0.9999  # the instruction is attended to
    assert float(embedder.encode_documents(text, task="T")[0] @ query[0]) > 0.99999  # symmetric: same rendering


def test_in_context_examples_change_the_query_embedding(embedder):
    plain = embedder.encode_queries(["q"], task="T")
    with_demo = embedder.encode_queries(["q"], task="T", examples=[("ex q", "ex p")])
    assert float(plain[0] @ with_demo[0]) < 0.9999
    batch = embedder.tokenize(["q"], task="T", examples=[[("ex q", "ex p")]])
    assert batch.pool_mask.sum() == 2  # "q" + EOS: the demonstrations are not pooled


def test_encode_keeps_input_order_with_length_sorting(embedder):
    texts = ["b", "a long text here", "mid text"]
    together = embedder.encode_documents(texts, batch_size=2)
    for i, t in enumerate(texts):
        assert float(together[i] @ embedder.encode_documents([t])[0]) > 0.99999


def test_bad_inputs_are_clear_errors(embedder):
    with pytest.raises(TypeError, match="not one string"):
        embedder.encode_documents("just one string")
    with pytest.raises(ValueError, match="batch_size"):
        embedder.encode_documents(["x"], batch_size=0)
    with pytest.raises(TypeError, match="item 1 is int"):
        embedder.tokenize(["x", 3], kind="document")


def test_ata_capture_matches_eager_attention(tiny_model_dir, tokenizer):
    model = AutoModel.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()
    reference = AutoModel.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()
    capture = LastLayerAttention.attach(model)
    assert LastLayerAttention.attach(model) is capture  # no second pair of hooks
    batch = tokenize_pairs(tokenizer, ["", ""], ["a b", "a b c d e"], max_length=32)
    with torch.no_grad():
        model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
        expected = reference(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_attentions=True
        ).attentions[-1]
    assert torch.allclose(capture.pop(), expected, atol=1e-5)
    with pytest.raises(RuntimeError, match="no attention weights"):
        capture.pop()
