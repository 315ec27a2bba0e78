"""The BF16 mma.sync exercise's check, on any machine: its exact product, its tolerance, its shape contract, and its
refusal of a GPU without BF16 tensor-core instructions (sm_75, Colab's T4) before the learner's code runs."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.exercises import TODO, VERDICT_SINK
from mlsys_lab.exercises import memory_hierarchy_mma_cuda as mma
from mlsys_lab.kernels.memory_hierarchy.bf16_gemm import from_bf16_bits, to_bf16_bits
from mlsys_lab.memory_hierarchy.tensor_cores import mma_shapes


def bits(values) -> np.ndarray:
    return to_bf16_bits(np.asarray(values, dtype=np.float32))


def test_the_example_is_a_selection_of_b():
    """Is the prompt's example C[i, j] = j - i mod 32, exactly, with a zero bound where C is a single product?"""
    product = mma.exact_product(*mma.EXAMPLE)
    i, j = np.arange(64)[:, None], np.arange(64)
    assert np.array_equal(product.exact, j - i % 32)
    assert product.exact[1, 0] == -1 and product.exact[0, 1] == 1 and product.exact[33, 10] == 9
    assert np.all(product.bound <= 33 * 2.0**-24 * 63)  # one nonzero product per element: |a||b| <= 63


def test_exact_product_against_integers():
    """Does the float64 product of small integers (exact in BF16 and in the sum) match integer arithmetic?"""
    g = np.random.default_rng(1)
    a, b = g.integers(-8, 9, size=(64, 96)), g.integers(-8, 9, size=(128, 96))
    product = mma.exact_product(bits(a), bits(b))
    assert np.array_equal(product.exact, a @ b.T)
    assert np.allclose(product.bound, 97 * 2.0**-24 * (np.abs(a) @ np.abs(b).T))


def test_tolerance_takes_fp32_accumulation_and_nothing_more():
    """Does the comparison accept an FP32 sum of the products (any order) and reject a dropped product, a result
    rounded to BF16, C's transpose, a NaN and a float64 C of the wrong shape?"""
    g = np.random.default_rng(2)
    a16, b16 = bits(g.standard_normal((64, 256))), bits(g.standard_normal((64, 256)))
    a, b = from_bf16_bits(a16), from_bf16_bits(b16)
    expected = mma.exact_product(a16, b16)
    products = a[:, None, :] * b[None, :, :]  # exact in float32: 8 + 8 significant bits
    forward = np.zeros((64, 64), dtype=np.float32)
    for k in range(256):
        forward += products[:, :, k]
    backward = np.zeros((64, 64), dtype=np.float32)
    for k in reversed(range(256)):
        backward += products[:, :, k]
    assert mma.close_to_product(forward, expected) and mma.close_to_product(backward, expected)
    assert mma.close_to_product(products.sum(axis=2, dtype=np.float32), expected)  # pairwise
    dropped = (products[:, :, :-1].sum(axis=2, dtype=np.float64)).astype(np.float32)
    assert not mma.close_to_product(dropped, expected)
    assert not mma.close_to_product(from_bf16_bits(to_bf16_bits(forward)), expected)
    assert not mma.close_to_product(np.ascontiguousarray(forward.T), expected)
    nan = forward.copy()
    nan[5, 7] = np.nan
    assert not mma.close_to_product(nan, expected)
    assert not mma.close_to_product(forward[:32], expected)
    assert not mma.close_to_product(forward.tolist(), expected)


def test_bound_is_wide_where_k_is_large_but_far_below_a_missing_slice():
    """How far is the bound from a dropped 32-wide k-slice on the check's largest case (K = 1024)?"""
    g = np.random.default_rng(3)
    a16, b16 = bits(g.standard_normal((64, 1024))), bits(g.standard_normal((64, 1024)))
    a, b = from_bf16_bits(a16).astype(np.float64), from_bf16_bits(b16).astype(np.float64)
    expected = mma.exact_product(a16, b16)
    slice_error = np.abs(a[:, -32:] @ b[:, -32:].T)
    assert np.median(slice_error / expected.bound) > 50


def test_cases_cover_the_contract_and_are_exact_bf16():
    """Are the hidden cases legal shapes (multiples of the block tile), non-square ones among them, with one K of a
    single slice and the 64 x 64 x 32 minimum, and each expected value the float64 product?"""
    cases = mma.bf16_mma_cases(np.random.default_rng(4))
    shapes = [mma_shapes(*case.args) for case in cases]
    assert (64, 64, 32) in shapes and any(m != n for m, n, _ in shapes) and any(k == 32 and m * n > 4096
                                                                              for m, n, k in shapes)
    for case, (m, n, _) in zip(cases, shapes, strict=True):
        a, b = case.args
        assert a.dtype == b.dtype == np.uint16 and case.expected.exact.shape == (m, n)
        if m == n and "example" not in case.label:  # C is not its transpose: A and B swapped is caught
            assert not np.allclose(case.expected.exact, case.expected.exact.T)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((64, 32), (64, 64)), ((100, 32), (64, 32)),
                                                  ((64, 32), (96, 32)), ((64, 48), (64, 48)), ((0, 32), (64, 32))])
def test_the_shape_contract_names_both_shapes(a_shape, b_shape):
    a, b = np.zeros(a_shape, dtype=np.uint16), np.zeros(b_shape, dtype=np.uint16)
    with pytest.raises(ValueError, match=rf"a_bits \(M, K\) and b_bits \(N, K\).*{a_shape[0]}, {a_shape[1]}"):
        mma_shapes(a, b)


def test_the_shape_contract_takes_multiples_of_the_tile():
    assert mma_shapes(np.zeros((128, 96), np.uint16), np.zeros((320, 96), np.uint16)) == (128, 320, 96)
    with pytest.raises(ValueError, match="a_bits must be a 2-D array"):
        mma_shapes(np.zeros(64, np.uint16), np.zeros((64, 32), np.uint16))


def verdicts_of(check, fn) -> list:
    verdicts = []
    token = VERDICT_SINK.set(verdicts.append)
    try:
        assert check(fn) is None
    finally:
        VERDICT_SINK.reset(token)
    return verdicts


def never(*args):
    raise AssertionError("the learner's function was called where it cannot run")


@pytest.mark.parametrize(("on_gpu", "capability"), [(True, (7, 5)), (False, None)], ids=["a T4 (sm_75)", "no GPU"])
def test_a_gpu_without_bf16_mma_is_refused_in_one_line(monkeypatch, capsys, on_gpu, capability):
    """On a T4 (compute capability 7.5) and on a CPU: one line, not graded (``needs``), the learner's function never
    called, nothing compiled."""
    monkeypatch.setattr(backend, "on_gpu", on_gpu)
    monkeypatch.setattr(backend, "compute_capability", lambda: capability)
    verdicts = verdicts_of(mma.check_bf16_mma_cuda, never)
    line = capsys.readouterr().out.strip()
    assert line == ("… bf16_mma_cuda: needs a CUDA GPU of compute capability 8.0 or newer (sm_80: A100, A10, L4, "
                    "H100), not graded here (Colab's free T4 is sm_75, without BF16 mma.sync: choose an A100 or L4 "
                    "runtime)")
    assert [(v.status, v.needs, v.n_cases) for v in verdicts] == [(TODO, mma.NEEDS, 0)]


def test_the_race_is_refused_below_sm80(monkeypatch):
    from mlsys_lab.kernels.loader import GPUTooOld, GPUUnavailable

    monkeypatch.setattr(backend, "on_gpu", False)
    with pytest.raises(GPUUnavailable):
        mma.race_bf16_mma_cuda(never)
    monkeypatch.setattr(backend, "on_gpu", True)
    monkeypatch.setattr(backend, "compute_capability", lambda: (7, 5))
    with pytest.raises(GPUTooOld, match="compute capability 8.0 or newer"):
        mma.race_bf16_mma_cuda(never)


@pytest.mark.parametrize("capability", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0)])
def test_ampere_and_newer_are_graded(monkeypatch, capability):
    monkeypatch.setattr(backend, "on_gpu", True)
    monkeypatch.setattr(backend, "compute_capability", lambda: capability)
    assert mma.gradable_here()
