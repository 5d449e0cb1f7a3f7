"""The training losses on hand-computed values, and InfoNCE label alignment across 2 gloo workers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.multiprocessing as mp

from embedforge.train.losses import (
    collection_distill_loss,
    embedding_distill_loss,
    in_batch_distill_loss,
    infonce_loss,
    pair_bce_loss,
    soft_label_distill_loss,
)
from embedforge.train.losses.pair_bce import graded_labels, prior_bias

E0, E1 = [1.0, 0.0], [0.0, 1.0]


def test_infonce_hard_negatives_only_matches_hand_value():
    q = torch.tensor([E0])
    cands = torch.tensor([[E0, E1]])
    loss, acc = infonce_loss(q, cands, temperature=1.0, in_batch=False)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    assert acc.item() == 1.0


def test_infonce_in_batch_uses_other_examples_candidates():
    q = torch.tensor([E0, E1])
    cands = torch.tensor([[E0, E1], [E1, E0]])  # each query sees 4 columns: 2 copies of its match
    loss, _ = infonce_loss(q, cands, temperature=1.0, in_batch=True)
    expected = -math.log(math.e / (2 * math.e + 2))
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_symmetric_infonce_averages_both_directions_by_hand():
    q = torch.tensor([E0, E1])
    cands = torch.tensor([[E0, E1], [E1, E0]])
    loss, acc = infonce_loss(q, cands, temperature=1.0, in_batch=True, symmetric=True)
    query_side = -math.log(math.e / (2 * math.e + 2))  # as in the test above
    positive_side = -math.log(math.e / (math.e + 1))  # each positive against the 2 queries: its own scores 1
    assert loss.item() == pytest.approx((query_side + positive_side) / 2, abs=1e-6)
    assert acc.item() == 0.5  # query-side accuracy: each query ties with the copy of its match, argmax takes one
    with pytest.raises(ValueError, match="in_batch"):
        infonce_loss(q, cands, temperature=1.0, in_batch=False, symmetric=True)


def test_infonce_rejects_bad_shapes():
    with pytest.raises(ValueError, match="candidates"):
        infonce_loss(torch.zeros(2, 4), torch.zeros(3, 2, 4))


def test_pair_bce_matches_eq2_by_hand():
    q = torch.tensor([E0])
    cands = torch.tensor([[E0, E1]])
    loss = pair_bce_loss(q, cands, alpha=1.0, beta=0.0, in_batch=False)
    softplus = lambda t: math.log1p(math.exp(t))  # noqa: E731
    assert loss.item() == pytest.approx(softplus(-1.0) + softplus(0.0), abs=1e-6)


def test_pair_bce_default_bias_is_label_prior():
    assert prior_bias(2, 8) == pytest.approx(-math.log(3))  # B=2, one hard negative: -log(2B - 1)
    q = torch.tensor([E0, E1])
    cands = torch.tensor([[E0, E1], [E1, E0]])
    explicit = pair_bce_loss(q, cands, alpha=1.0, beta=-math.log(3))
    derived = pair_bce_loss(q, cands, alpha=1.0, beta=None)
    assert derived.item() == pytest.approx(explicit.item(), abs=1e-6)
    with pytest.raises(ValueError, match="beta"):
        prior_bias(0, 4)


def test_graded_labels_eq4_on_trec_dl_grades(shared_data):
    qrels = (shared_data / "trec_dl_msmarco_subset" / "qrels" / "test.tsv").read_text().splitlines()
    grades = sorted({float(line.split("\t")[-1]) for line in qrels if line.strip()})
    assert grades == [1.0, 2.0, 3.0]
    z = graded_labels(torch.tensor([*grades, 0.0, float("nan")]), torch.full((5,), 3.0), floor=0.7)
    assert z.tolist() == pytest.approx([0.8, 0.9, 1.0, 0.0, 1.0])
    q = torch.tensor([E0])
    cands = torch.tensor([[[0.6, 0.8], E1]])
    loss = pair_bce_loss(q, cands, alpha=1.0, beta=0.0, positive_labels=torch.tensor([0.8]), in_batch=False)
    sig = lambda t: 1 / (1 + math.exp(-t))  # noqa: E731
    expected = -(0.8 * math.log(sig(0.6)) + 0.2 * math.log(sig(-0.6))) - math.log(sig(0.0))
    assert loss.item() == pytest.approx(expected, abs=1e-6)


def test_soft_label_distill_is_kl_teacher_student():
    q = torch.tensor([E0, E0])
    cands = torch.tensor([[E0, E1], [E0, E1]])
    teacher = torch.tensor([[0.9, 0.1], [float("nan"), 0.2]])  # second row has no teacher: masked out
    loss = soft_label_distill_loss(q, cands, teacher, teacher_temperature=0.1, student_temperature=1.0)
    t = [math.exp(9) / (math.exp(9) + math.exp(1)), math.exp(1) / (math.exp(9) + math.exp(1))]
    s = [math.e / (math.e + 1), 1 / (math.e + 1)]
    expected = sum(ti * math.log(ti / si) for ti, si in zip(t, s, strict=True))
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    none = soft_label_distill_loss(q, cands, torch.full((2, 2), float("nan")))
    assert none.item() == 0.0


def test_collection_distill_spreads_the_student_over_the_whole_collection():
    """Teacher mass on each query's scored candidates only (unscored and padded ones get none); the student's
    softmax runs over every document of the collection, so the documents no teacher ranked still count."""
    collection = torch.tensor([E0, E1, [-1.0, 0.0]])  # three fixed document vectors
    q = torch.tensor([E0, E1, E1])
    rows = torch.tensor([[0, 1, 2], [1, 0, 0], [0, 1, 0]])
    inf, nan = float("inf"), float("nan")
    teacher = torch.tensor([[0.3, 0.1, nan], [0.2, -inf, -inf], [nan, nan, -inf]])  # third query: no teacher
    loss = collection_distill_loss(q, collection, rows, teacher, teacher_temperature=0.1, student_temperature=1.0)
    z = math.exp(1) + math.exp(0) + math.exp(-1)  # query E0 over the collection: cosines 1, 0, -1
    t = [math.exp(3) / (math.exp(3) + math.exp(1)), math.exp(1) / (math.exp(3) + math.exp(1))]
    first = t[0] * math.log(t[0] / (math.e / z)) + t[1] * math.log(t[1] / (1 / z))
    second = math.log(1 / (math.e / (math.e + 2)))  # query E1: all mass on document 1 (cosines 0, 1, 0)
    assert loss.item() == pytest.approx((first + second) / 2, abs=1e-5)
    with pytest.raises(ValueError, match="do not match"):
        collection_distill_loss(q, collection, rows[:, :2], teacher, 0.1, 1.0)


def test_in_batch_distill_targets_every_candidate_of_the_batch_whatever_the_teacher_width():
    q = torch.tensor([E0, E1])
    cands = torch.tensor([[E0, E1], [E1, E0]])  # 4 candidates in the batch
    # a 3-wide teacher: only its scores count
    tq = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    tc = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [[0.0, 0.0, 1.0], [0.6, 0.0, 0.8]]])
    loss = in_batch_distill_loss(q, cands, tq, tc, teacher_temperature=0.5, student_temperature=1.0)
    student = [[1, 0, 0, 1], [0, 1, 1, 0]]
    teacher = [[1, 0, 0, 0.6], [0, 0, 1, 0.8]]
    expected = 0.0
    for s_row, t_row in zip(student, teacher, strict=True):
        t = [math.exp(v / 0.5) for v in t_row]
        t = [v / sum(t) for v in t]
        s = [math.exp(v) for v in s_row]
        s = [v / sum(s) for v in s]
        expected += sum(ti * math.log(ti / si) for ti, si in zip(t, s, strict=True)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    # the same scores from the teacher give no loss at equal temperatures
    same = in_batch_distill_loss(q, cands, q, cands, teacher_temperature=1.0, student_temperature=1.0)
    assert same.item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="teacher embeddings"):
        in_batch_distill_loss(q, cands, tq[:1], tc)


def test_embedding_distill_masks_padding():
    student = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    loss = embedding_distill_loss(student, torch.zeros(2, 2), mask=torch.tensor([1, 0]))
    assert loss.item() == pytest.approx(2.5)
    with pytest.raises(ValueError, match="width"):
        embedding_distill_loss(torch.zeros(2, 3), torch.zeros(2, 2))


# -- 2 gloo workers: gathered InfoNCE with several negatives per example --------------------------------------

WORLD, PER_RANK, NEGS, DIM = 2, 3, 3, 32


def _global_batch() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(7)
    cands = torch.nn.functional.normalize(torch.randn(WORLD * PER_RANK, 1 + NEGS, DIM, generator=gen), dim=-1)
    noise = 0.05 * torch.randn(WORLD * PER_RANK, DIM, generator=gen)
    queries = torch.nn.functional.normalize(cands[:, 0] + noise, dim=-1)  # each query sits on its own positive
    return queries, cands


def _worker(rank: int, init_file: str, out: dict) -> None:
    import torch.distributed as dist

    from embedforge.train.losses.infonce import infonce_logits

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    queries, cands = _global_batch()
    rows = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    q, c = queries[rows].clone(), cands[rows].clone().requires_grad_(True)
    logits, labels = infonce_logits(q, c, temperature=0.05, in_batch=True)
    loss, acc = infonce_loss(q, c, temperature=0.05, in_batch=True)
    loss.backward()
    sym_q, sym_c = queries[rows].clone().requires_grad_(True), cands[rows].clone().requires_grad_(True)
    symmetric, _ = infonce_loss(sym_q, sym_c, temperature=0.05, in_batch=True, symmetric=True)
    symmetric.backward()
    out[rank] = {
        "labels": labels.tolist(),
        "argmax": logits.argmax(dim=1).tolist(),
        "columns": logits.shape[1],
        "loss": loss.item(),
        "acc": acc.item(),
        "grad": c.grad.clone(),
        "symmetric": symmetric.item(),
        "symmetric_grads": (sym_q.grad.clone(), sym_c.grad.clone()),
    }
    dist.destroy_process_group()


def test_infonce_gathered_labels_align_across_two_workers(tmp_path):
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        out = manager.dict()
        procs = [ctx.Process(target=_worker, args=(r, str(tmp_path / "pg"), out)) for r in range(WORLD)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        results = dict(out)
    for rank in range(WORLD):
        r = results[rank]
        expected = [(rank * PER_RANK + i) * (1 + NEGS) for i in range(PER_RANK)]
        assert r["labels"] == expected  # the positive's column in the gathered layout
        assert r["argmax"] == expected  # and the best-scoring column really is that positive
        assert r["columns"] == WORLD * PER_RANK * (1 + NEGS)
        assert r["acc"] == 1.0
    # same loss and gradients as one process holding the whole global batch
    queries, cands = _global_batch()
    cands = cands.clone().requires_grad_(True)
    full, _ = infonce_loss(queries, cands, temperature=0.05, in_batch=True)
    full.backward()
    assert sum(results[r]["loss"] for r in range(WORLD)) / WORLD == pytest.approx(full.item(), abs=1e-5)
    dist_grad = torch.cat([results[r]["grad"] for r in range(WORLD)]) / WORLD  # DDP averages over workers
    assert torch.allclose(dist_grad, cands.grad, atol=1e-6)
    # the symmetric loss gathers the queries too: the same loss and gradients of both sides as one process
    queries = queries.clone().requires_grad_(True)
    cands = cands.detach().clone().requires_grad_(True)
    full, _ = infonce_loss(queries, cands, temperature=0.05, in_batch=True, symmetric=True)
    full.backward()
    assert sum(results[r]["symmetric"] for r in range(WORLD)) / WORLD == pytest.approx(full.item(), abs=1e-5)
    for side, whole in enumerate((queries.grad, cands.grad)):
        dist_grad = torch.cat([results[r]["symmetric_grads"][side] for r in range(WORLD)]) / WORLD
        assert torch.allclose(dist_grad, whole, atol=1e-6)
