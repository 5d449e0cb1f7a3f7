"""The repetition penalty on seen tokens gives bit-identical logits to vLLM's full-vocabulary path, and leaves
frequency and presence penalties to vLLM."""

from __future__ import annotations

import pytest
import torch

from embedforge.synth.penalties import install_cpu_penalties, penalize_seen

penalty_ops = pytest.importorskip("vllm.v1.sample.ops.penalties", reason="needs vLLM")
sampler = pytest.importorskip("vllm.v1.sample.sampler", reason="needs vLLM")
VOCAB = 5_000


def _case(rows: int = 6) -> tuple[torch.Tensor, torch.Tensor, list[list[int]], torch.Tensor]:
    """Logits of both signs, prompts of different lengths padded with the vocabulary size, outputs of different
    lengths (one empty, one with vLLM's -1 placeholder, repeated tokens), a different penalty per row."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(rows, VOCAB, generator=generator) * 4
    prompt = torch.randint(0, VOCAB, (rows, 40), generator=generator)
    for i in range(rows):
        prompt[i, 40 - 5 * i :] = VOCAB
    outputs = [torch.randint(0, VOCAB, (7 * i,), generator=generator).tolist() for i in range(rows)]
    outputs[2] += [*outputs[2][:3], -1]
    penalty = torch.linspace(1.0, 1.6, rows)
    return logits, prompt, outputs, penalty


def vllm_penalties(logits, prompt, outputs, penalty, presence=None, frequency=None) -> torch.Tensor:
    zeros = torch.zeros(logits.shape[0])
    presence = zeros if presence is None else presence
    frequency = zeros if frequency is None else frequency
    return penalty_ops.apply_all_penalties(logits, prompt, presence, frequency, penalty, outputs)


def test_same_logits_as_vllm() -> None:
    logits, prompt, outputs, penalty = _case()
    ours = penalize_seen(logits.clone(), prompt, outputs, penalty)
    theirs = vllm_penalties(logits.clone(), prompt, outputs, penalty)
    assert torch.equal(ours, theirs)
    changed = ours != logits
    assert not changed[0].any()  # penalty 1 changes nothing
    seen = set(prompt[3].tolist()) | set(outputs[3])
    assert changed[3].nonzero().squeeze(1).tolist() == sorted(t for t in seen if t < VOCAB)
    positive = logits[3] > 0
    assert (ours[3][changed[3] & positive] < logits[3][changed[3] & positive]).all()  # a penalty lowers both signs
    assert (ours[3][changed[3] & ~positive] < logits[3][changed[3] & ~positive]).all()


def test_installed_penalties_leave_frequency_and_presence_to_vllm(installed) -> None:
    _, ours = installed(sampler, "apply_all_penalties", install_cpu_penalties)

    logits, prompt, outputs, penalty = _case()
    zeros = torch.zeros(logits.shape[0])
    frequency = torch.full((logits.shape[0],), 0.5)
    assert torch.equal(
        ours(logits.clone(), prompt, zeros, frequency, penalty, outputs),
        vllm_penalties(logits.clone(), prompt, outputs, penalty, frequency=frequency),
    )
    assert torch.equal(
        ours(logits.clone(), prompt, zeros, zeros, penalty, outputs),
        vllm_penalties(logits.clone(), prompt, outputs, penalty),
    )
