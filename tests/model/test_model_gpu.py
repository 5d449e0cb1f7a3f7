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
