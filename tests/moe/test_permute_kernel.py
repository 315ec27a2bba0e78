"""Are the token permutation's references right, by hand and against GShard's einsums, and are the CUDA exercises'
cases what they say? (The kernels themselves run in tests/moe/test_cuda_exercise_catalogue.py, on a GPU.)"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.exercises import moe_cuda
from mlsys_lab.exercises.moe import reference_top_k_gate
from mlsys_lab.kernels.loader import GPUUnavailable
from mlsys_lab.kernels.moe.permute import (
    moe_permute,
    moe_permute_bytes,
    moe_permute_reference,
    moe_unpermute,
    moe_unpermute_bytes,
    moe_unpermute_reference,
)
from mlsys_lab.moe.gating import assign_with_capacity, top_k_gating

X = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
EXPERT = np.array([[0, 1], [0, 2], [0, 1], [1, 0]], dtype=np.int32)
SLOT = np.array([[0, 1], [1, 0], [-1, -1], [0, -1]], dtype=np.int32)


def test_the_lessons_priority_order_gives_the_examples_slots():
    """Do first choices take their slots before second ones (token 2 finds expert 0 full, then expert 1)?"""
    kept, slot = assign_with_capacity(EXPERT, 3, 2)
    assert np.array_equal(slot, SLOT) and np.array_equal(kept, SLOT >= 0)


def test_permute_by_hand():
    """Does each kept pair's row land at (expert, slot), with zeros in the one slot nobody fills?"""
    buffers = moe_permute_reference(X, EXPERT, SLOT, 3, 2)
    expected = np.array([[X[0], X[1]], [X[3], X[0]], [X[1], [0, 0, 0]]], dtype=np.float32)
    assert buffers.dtype == np.float32 and np.array_equal(buffers, expected)


def test_unpermute_by_hand():
    """Is out[t] the gate-weighted sum of token t's kept rows, and 0 for a token whose pairs were all dropped?"""
    y = moe_permute_reference(X, EXPERT, SLOT, 3, 2) * np.float32([1, 2, 3])[:, None, None]
    weight = np.array([[0.75, 0.25], [0.5, 0.5], [0.6, 0.4], [0.9, 0.1]], dtype=np.float32)
    out = moe_unpermute_reference(y, EXPERT, SLOT, weight)
    expected = np.array([1.25 * X[0], 2 * X[1], [0, 0, 0], 1.8 * X[3]])   # 0.75·1 + 0.25·2; 0.5·1 + 0.5·3; 0.9·2
    assert out.dtype == np.float32 and np.allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize(("n_tokens", "n_experts", "k", "capacity"), [(40, 4, 2, 12), (30, 5, 1, 3), (9, 3, 3, 9),
                                                                        (12, 4, 2, 0)])
def test_permute_ffn_unpermute_is_gshards_combine_einsum(n_tokens, n_experts, k, capacity):
    """Does unpermute(ffn(permute(x))) equal einsum("tec,ecd->td", combine, ffn(einsum("tec,td->ecd", combine > 0,
    x))) with the combine tensor of exercise 2's reference?"""
    g = np.random.default_rng(n_tokens)
    logits = g.normal(size=(n_tokens, n_experts)) + g.normal(size=n_experts)
    x = g.normal(size=(n_tokens, 6)).astype(np.float32)
    w = g.normal(size=(n_experts, 6, 6)).astype(np.float32)
    combine = reference_top_k_gate(logits, k, capacity)                         # (T, n, C)
    expert_in = np.einsum("tec,td->ecd", combine > 0, x)
    dense = np.einsum("tec,ecd->td", combine, np.einsum("ecd,edf->ecf", expert_in, w))

    indices, weights = top_k_gating(logits, k)
    _, slot = assign_with_capacity(indices, n_experts, capacity)
    buffers = moe_permute_reference(x, indices, slot, n_experts, capacity)
    assert np.array_equal(buffers, expert_in.astype(np.float32))
    out = moe_unpermute_reference(np.einsum("ecd,edf->ecf", buffers, w).astype(np.float32), indices, slot,
                                  weights.astype(np.float32))
    assert np.allclose(out, dense, rtol=1e-4, atol=1e-4)


def test_bytes_count_the_buffers_once_and_each_kept_row():
    """Permute: the n·C·d buffers written, the 3 tokens with a kept pair read; unpermute: 5 kept rows, 4 written."""
    assert moe_permute_bytes(SLOT, 3, 2, 3) == 4 * 3 * (3 * 2 + 3) + 8 * SLOT.size
    assert moe_unpermute_bytes(SLOT, 3) == 4 * 3 * (5 + 4) + 12 * SLOT.size


@pytest.mark.parametrize(("slot", "match"), [(np.array([[0, 2]]), "slot must lie in"), (np.array([[-2, 0]]),
                                                                                       "slot must lie in"),
                                             (np.array([[0, 0]]), "a slot of its own")])
def test_references_reject_a_routing_out_of_range(slot, match):
    """Is a slot past the capacity, below −1, or shared by two kept pairs of one expert named?"""
    with pytest.raises(ValueError, match=match):
        moe_permute_reference(X[:1], np.array([[1, 1]]), slot, 3, 2)


def test_references_name_bad_shapes():
    with pytest.raises(ValueError, match="expert must lie in"):
        moe_permute_reference(X[:1], np.array([[3, 0]]), np.array([[0, 0]]), 3, 2)
    with pytest.raises(ValueError, match="slot"):
        moe_permute_reference(X, EXPERT, SLOT[:2], 3, 2)
    with pytest.raises(ValueError, match="weight"):
        moe_unpermute_reference(np.zeros((3, 2, 3), np.float32), EXPERT, SLOT, np.ones((4, 1), np.float32))


@pytest.mark.skipif(backend.on_gpu, reason="the launchers run on this GPU (tests/moe/test_cuda_exercise_catalogue.py)")
def test_launchers_need_a_gpu():
    with pytest.raises(GPUUnavailable):
        moe_permute(X, EXPERT, SLOT, 3, 2)
    with pytest.raises(GPUUnavailable):
        moe_unpermute(np.zeros((3, 2, 3), np.float32), EXPERT, SLOT, np.ones((4, 2), np.float32))


@pytest.mark.parametrize("make", [moe_cuda.permute_cases, moe_cuda.unpermute_cases])
def test_the_checks_cases_cover_the_boundaries(make):
    """14 cases: the example, no token, capacity 0, d = 1 and 37, a large one; each reference passes its own case."""
    cases = make(np.random.default_rng(0))
    labels = " | ".join(c.label for c in cases)
    assert len(cases) == 14
    for needed in ("the example", "T=0", "T=1,", "k=1", "capacity 0", "d=37", "d=1,", "T=6000"):
        assert needed in labels
    assert all(c.check_result(c.expected) is None for c in cases)


def test_the_last_two_cases_share_their_shapes_and_the_second_leaves_slots_empty():
    """Does the emptied case allocate what the filled one freed (same shapes), with most slots and rows left 0?"""
    for make in (moe_cuda.permute_cases, moe_cuda.unpermute_cases):
        filled, emptied = make(np.random.default_rng(1))[-2:]
        assert [np.shape(a) for a in filled.args] == [np.shape(a) for a in emptied.args]
        assert np.all(filled.expected != 0) and np.mean(emptied.expected == 0) >= 0.7


def test_a_slot_left_unzeroed_is_named():
    case = moe_cuda.permute_cases(np.random.default_rng(2))[0]
    got = case.expected.copy()
    got[2, 1, 0] = 7.0
    assert "no pair goes to slot 1 of expert 2" in case.check_result(got)
    got = case.expected.copy()
    got[0, 1, 2] = 0.0
    assert case.check_result(got) == "buffers[0, 1, 2] = 0, expected 6 (x[1, 2])"


def test_a_dropped_tokens_row_is_named():
    case = moe_cuda.unpermute_cases(np.random.default_rng(2))[0]
    got = case.expected.copy()
    got[2, 0] = np.nan
    assert "every pair of token 2 was dropped" in case.check_result(got)
    assert "dtype float64" in case.check_result(case.expected.astype(np.float64))


@pytest.mark.skipif(backend.on_gpu, reason="on a GPU the checks run the cases")
def test_checks_say_in_one_line_that_they_need_a_gpu(capsys):
    moe_cuda.check_moe_permute_cuda(lambda *a: None)
    moe_cuda.check_moe_unpermute_cuda(lambda *a: None)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("needs a CUDA GPU" in line for line in lines)
