"""The same guarantees on CUDA, where SDPA dispatches to fused kernels that read the `is_causal` flag.

Fused kernels are where bidirectionality is silently lost at batch size 1 if only the mask is changed
(llm2vec issue 74); bf16 is the production dtype (NV-Embed appendix C).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from embedforge.config.model import POOLING_HEADS, ModelConfig
from embedforge.model import load_embedder

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU (CUDA SDPA kernels)"),
]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_bidirectional_at_batch_size_one(tiny_model_dir, dtype):
    results = {}
    for bidirectional in (True, False):
        embedder = load_embedder(
            ModelConfig(backbone=str(tiny_model_dir), dtype=dtype, bidirectional=bidirectional)
        ).to("cuda")
        states = []
        for text in ["one two three four five", "one two three four six"]:
            batch = embedder.tokenize([text], kind="document").to("cuda")
            with torch.no_grad():
                out = embedder.backbone(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
            states.append(out.last_hidden_state[0, 0].float())
        results[bidirectional] = torch.allclose(states[0], states[1], atol=1e-3)
    assert results == {True: False, False: True}


@pytest.mark.parametrize("pooling", POOLING_HEADS)
@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_cuda_padded_batches_equal_single_inputs(tiny_model_dir, pooling, padding_side):
    config = ModelConfig(backbone=str(tiny_model_dir), pooling=pooling, dtype="float32")
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config).to("cuda")
    embedder.padding_side = padding_side
    texts = ["a", "a much longer text that needs padding on the others", "mid length text"]
    batched = embedder.encode_queries(texts, task="Find it", batch_size=3)
    for i, text in enumerate(texts):
        assert float(batched[i] @ embedder.encode_queries([text], task="Find it", batch_size=1)[0]) > 0.9999


def test_cuda_lora_training_step_bf16(tiny_model_dir):
    embedder = load_embedder(ModelConfig(backbone=str(tiny_model_dir), dtype="bfloat16", pooling="latent_attention"))
    embedder.enable_lora()
    embedder.to("cuda")
    batch = embedder.tokenize(["q one", "q two"], task="T", kind="query")
    emb = embedder(batch)
    assert emb.dtype == torch.float32 and emb.device.type == "cuda"
    (1 - emb[0] @ emb[1]).backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in embedder.named_parameters() if "lora" in n)


def test_an_encoder_placed_on_cuda_runs_in_half_precision_unless_forced(tiny_model_dir):
    """`model.dtype: auto` is bf16 on a GPU that has it (cluster.device.inference_dtype); float32 when forced."""
    from embedforge.cluster.device import model_dtype
    from embedforge.model import load_encoder

    auto = load_encoder(str(tiny_model_dir), device="cuda")
    assert model_dtype(auto) == ("bfloat16" if torch.cuda.is_bf16_supported() else "float16")
    float32 = ModelConfig(backbone=str(tiny_model_dir), dtype="float32")
    forced = load_encoder(str(tiny_model_dir), float32, device="cuda")
    assert model_dtype(forced) == "float32"
    vectors = auto.encode_documents(["one text", "another text"])
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
def test_cuda_varlen_kernel_equals_the_per_text_reference(causal):
    """FlashAttention's varlen kernel (bf16, grouped-query heads) against the per-text SDPA loop in float32."""
    from embedforge.model.packed import uses_flash, varlen_attention

    torch.manual_seed(0)
    lengths = [37, 512, 5, 200]
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lengths), 8, 64, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lengths), 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    assert uses_flash(q)
    fused = varlen_attention(q, k, v, cu, max(lengths), causal).float()
    reference = varlen_attention(q.float(), k.float(), v.float(), cu, max(lengths), causal)
    assert (fused - reference).norm() / reference.norm() < 1e-2


@pytest.mark.parametrize("pooling", ["mean", "latent_attention", "last"])
def test_cuda_packed_decoder_equals_padded_in_bf16(tiny_model_dir, pooling):
    config = ModelConfig(backbone=str(tiny_model_dir), dtype="bfloat16", pooling=pooling)
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config).to("cuda")
    texts = ["a", "a much longer text that needs padding on the others", "mid length text"] * 3
    assert embedder._runs_packed(embedder.backbone)  # auto: on, a GPU in half precision
    packed = embedder.encode_queries(texts, task="Find it", batch_size=9)
    embedder.packing = "never"
    padded = embedder.encode_queries(texts, task="Find it", batch_size=9)
    assert float((packed * padded).sum(axis=1).min()) > 0.999


def test_cuda_packed_lora_step_under_autocast_matches_padded(tiny_model_dir):
    """Training computes in bf16 through autocast over float32 master weights: packed there too, same gradients
    up to bf16 rounding."""
    config = ModelConfig(backbone=str(tiny_model_dir), pooling="latent_attention")
    config.lora.dropout = 0.0
    config.latent_attention.num_latents, config.latent_attention.num_heads = 8, 2
    embedder = load_embedder(config)
    embedder.enable_lora()
    embedder.to("cuda").train()
    batch = embedder.tokenize(["q one", "a longer second query text here", "three"], task="T", kind="query")
    grads = {}
    for packing in ("auto", "never"):
        embedder.packing = packing
        embedder.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert embedder._runs_packed(embedder.backbone) == (packing == "auto")
            emb = embedder(batch)
        (emb @ emb.T).triu(1).sum().backward()
        grads[packing] = torch.cat([p.grad.flatten() for n, p in embedder.named_parameters() if "lora_B" in n])
    assert (grads["auto"] - grads["never"]).norm() / grads["never"].norm() < 5e-2


def test_cuda_unpadded_bert_equals_padded_in_bf16():
    """BERT-family inference on the real tokens with varlen attention on a GPU equals the model's padded forward."""
    from transformers import BertConfig, BertModel

    from embedforge.model.unpadded import UnpaddedBertModel

    torch.manual_seed(0)
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
    bert = BertModel(config, add_pooling_layer=False).to("cuda", torch.bfloat16).eval()
    mask = torch.zeros(4, 40, dtype=torch.long, device="cuda")
    for i, n in enumerate([40, 3, 17, 29]):
        mask[i, :n] = 1
    ids = torch.randint(0, 1000, (4, 40), device="cuda")
    with torch.inference_mode():
        padded = bert(input_ids=ids, attention_mask=mask).last_hidden_state.float()
        unpadded = UnpaddedBertModel(bert).last_hidden_state(ids, mask).float()
    real = mask.bool()
    assert (unpadded[real] - padded[real]).norm() / padded[real].norm() < 2e-2
