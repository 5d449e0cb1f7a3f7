"""Top-p without a full-vocabulary sort keeps exactly the tokens vLLM's own sort keeps, and goes back to that sort
only for rows whose nucleus fills the largest head it looks at."""

from __future__ import annotations

import pytest
import torch

from embedforge.synth.top_p import HEADS, install_cpu_top_p, top_p_filter

sampler = pytest.importorskip("vllm.v1.sample.ops.topk_topp_sampler", reason="needs vLLM")
INF = float("inf")


def vllm_sort(logits: torch.Tensor, k: torch.Tensor | None, p: torch.Tensor | None) -> torch.Tensor:
    return sampler.apply_top_k_top_p_pytorch(logits, k, p, allow_cpu_sync=True)


def _logits(rows: int = 48, vocab: int = 49_152) -> torch.Tensor:
    """Rows from peaked (a language model mid-sentence) to flat, some with most tokens masked (guided decoding)."""
    generator = torch.Generator().manual_seed(0)
    scale = torch.linspace(12.0, 0.5, rows).unsqueeze(1)
    logits = torch.randn(rows, vocab, generator=generator) * scale
    logits[:6, 500:] = -INF
    logits[6, 1:] = -INF  # one allowed token
    return logits


def _kept(logits: torch.Tensor) -> torch.Tensor:
    return logits > -INF


@pytest.mark.parametrize("top_p", [0.95, 0.5, 0.99])
def test_keeps_the_same_tokens_as_vllms_sort(top_p: float) -> None:
    logits = _logits()
    p = torch.full((logits.shape[0],), top_p)
    p[3] = 1.0
    calls: list[int] = []

    def counted_sort(rows: torch.Tensor, k: torch.Tensor | None, q: torch.Tensor | None) -> torch.Tensor:
        calls.append(rows.shape[0])
        return vllm_sort(rows, k, q)

    ours = top_p_filter(logits.clone(), p, counted_sort)
    theirs = vllm_sort(logits.clone(), None, p)
    assert torch.equal(_kept(ours), _kept(theirs))
    kept = _kept(ours).sum(dim=1)
    assert kept[6] == 1 and kept[3] == _kept(logits[3]).sum()  # one allowed token; p = 1 keeps all
    filtered = kept[p < 1]
    wide = int((filtered >= HEADS[-1]).sum())
    assert sum(calls) == wide and wide > 0  # only rows whose nucleus fills the largest head were sorted
    assert int(((filtered >= HEADS[0]) & (filtered < HEADS[-1])).sum()) > 0  # some were settled by the second head
    assert kept[0] < HEADS[0]  # and the peaked rows by the first


def test_keeps_finite_logits_unchanged() -> None:
    logits = _logits(rows=8)
    ours = top_p_filter(logits.clone(), torch.full((8,), 0.9), vllm_sort)
    kept = _kept(ours)
    assert torch.equal(ours[kept], logits[kept])


def test_installed_filter_leaves_top_k_to_vllm(installed) -> None:
    original, ours = installed(sampler, "apply_top_k_top_p", install_cpu_top_p)

    logits = _logits(rows=8, vocab=1_000)
    k, p = torch.full((8,), 5), torch.full((8,), 0.9)
    assert torch.equal(ours(logits.clone(), k, p), original(logits.clone(), k, p))
    assert torch.equal(_kept(ours(logits.clone(), None, p)), _kept(vllm_sort(logits.clone(), None, p)))
    assert torch.equal(ours(logits.clone(), None, None), logits)
