"""Bidirectional attention on the real tiny Llama: token 0 sees the last token, padding never changes a result."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from embedforge.config.model import POOLING_HEADS, ModelConfig
from embedforge.model import load_embedder
from embedforge.model.bidirectional import is_bidirectional, set_attention_direction


@pytest.fixture(scope="module")
def backbone(tiny_model_dir):
    torch.manual_seed(0)
    return AutoModel.from_pretrained(tiny_model_dir, attn_implementation="sdpa").eval()


def _token0_state(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    return out.last_hidden_state[0, 0]


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_token0_depends_on_last_token_only_when_bidirectional(tiny_model_dir, implementation):
    model = AutoModel.from_pretrained(tiny_model_dir, attn_implementation=implementation).eval()
    a, b = [100, 200, 300, 400], [100, 200, 300, 999]
    set_attention_direction(model, bidirectional=False)
    assert torch.allclose(_token0_state(model, a), _token0_state(model, b))  # causal: token 0 blind to the end
    set_attention_direction(model, bidirectional=True)
    assert is_bidirectional(model)
    assert not torch.allclose(_token0_state(model, a), _token0_state(model, b), atol=1e-5)
    set_attention_direction(model, bidirectional=False)  # switching back restores causal behaviour
    assert torch.allclose(_token0_state(model, a), _token0_state(model, b))


def test_idempotent(backbone):
    ids = [5, 6, 7, 8]
    set_attention_direction(backbone, True)
    first = _token0_state(backbone, ids)
    set_attention_direction(backbone, True)
    assert torch.equal(first, _token0_state(backbone, ids))
    assert backbone.config.is_causal is False


def test_unsupported_architecture_is_refused():
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(ValueError, match=r"unsupported architecture 'gpt2'.*llama"):
        set_attention_direction(model, True)


@pytest.mark.parametrize("pooling", POOLING_HEADS)
@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_padded_batch_equals_single_inputs(tiny_model_dir, pooling, padding_side, bidirectional):
    """Every pooling (ATA's anchor weights included, MGH 2.2) sees the same tokens in a padded batch as in a batch of
    one, whichever side pads and whichever way attention runs: the per-sequence encoding is the reference."""
    config = ModelConfig(backbone=str(tiny_model_dir), pooling=pooling, bidirectional=bidirectional)
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config)
    embedder.padding_side = padding_side
    texts = ["a", "a much longer text that needs padding on the others", "mid length text"]
    batched = embedder.encode_queries(texts, task="Find it", batch_size=3)
    singles = [embedder.encode_queries([t], task="Find it", batch_size=1)[0] for t in texts]
    for row, single in zip(batched, singles, strict=True):
        assert float(row @ single) > 0.99999


def test_bidirectional_embedder_differs_from_causal(tiny_model_dir):
    texts = ["the first words stay the same but the end changes"]
    bi = load_embedder(ModelConfig(backbone=str(tiny_model_dir), pooling="mean"))
    causal = load_embedder(ModelConfig(backbone=str(tiny_model_dir), pooling="mean", bidirectional=False))
    assert float(bi.encode_documents(texts)[0] @ causal.encode_documents(texts)[0]) < 0.9999
