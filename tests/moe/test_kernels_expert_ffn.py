"""Do the loop, the grouped schedule, the padded batched GEMM and the grouped-GEMM kernel give one answer?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, on_gpu, xp
from mlsys_lab.kernels.moe.expert_ffn import (
    expert_slots,
    grouped_gemm_tiles,
    moe_ffn_grouped,
    moe_ffn_grouped_kernel,
    moe_ffn_loop,
    moe_ffn_padded_batched,
)
from mlsys_lab.moe.synthetic import random_routing


@pytest.mark.parametrize(("n_tokens", "n_experts", "top_k", "skew"),
                         [(37, 8, 2, 0.0), (64, 16, 4, 2.0), (5, 8, 1, 0.0), (3, 16, 2, 0.0)])  # last: idle experts
def test_grouped_gemm_equals_the_expert_loop(n_tokens, n_experts, top_k, skew):
    args = random_routing(n_tokens, n_experts, top_k, 24, 40, dtype=np.float64, seed=n_tokens, skew=skew)
    loop, grouped = asnumpy(moe_ffn_loop(*args)), asnumpy(moe_ffn_grouped(*args))
    np.testing.assert_allclose(grouped, loop, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(asnumpy(moe_ffn_padded_batched(*args)), loop, rtol=1e-10, atol=1e-12)
    # independent reference: every token, every choice, dense
    x, idx, gate, w1, w2 = (asnumpy(a) for a in args)
    dense = 0
    for j in range(top_k):
        hidden = np.maximum(np.einsum("td,tdf->tf", x, w1[idx[:, j]]), 0)
        dense = dense + gate[:, j:j + 1] * np.einsum("tf,tfd->td", hidden, w2[idx[:, j]])
    np.testing.assert_allclose(loop, dense, rtol=1e-10, atol=1e-12)


def test_grouped_gemm_tiles_cut_every_segment_into_64_row_tiles():
    # experts with 130, 0 and 64 rows: segments [0, 130), [130, 130), [130, 194)
    tiles = grouped_gemm_tiles([130, 0, 64], [0, 130, 130])
    np.testing.assert_array_equal(tiles, [[0, 0, 130], [0, 64, 130], [0, 128, 130], [2, 130, 194]])
    assert grouped_gemm_tiles([0, 0], [0, 0]).shape == (0, 3)


@pytest.mark.parametrize(("n_tokens", "n_experts", "top_k", "skew"), [(300, 8, 2, 3.0), (5, 16, 2, 0.0)])
def test_grouped_gemm_kernel_equals_the_dense_reference(n_tokens, n_experts, top_k, skew):
    """On a GPU: the tensor-core kernel (fp16 in, fp32 accumulate) against float64; segments longer than a
    64-row tile and experts with no tokens included. On a CPU: the NumPy path, exactly."""
    dtype = np.float16 if on_gpu else np.float64
    args = random_routing(n_tokens, n_experts, top_k, 64, 96, dtype=dtype, seed=n_tokens, skew=skew)
    x, gate, w1, w2 = (asnumpy(a).astype(np.float64) for a in (args[0], *args[2:]))
    idx = asnumpy(args[1])
    dense = 0
    for j in range(top_k):
        hidden = np.maximum(np.einsum("td,tdf->tf", x, w1[idx[:, j]]), 0)
        dense = dense + gate[:, j:j + 1] * np.einsum("tf,tfd->td", hidden, w2[idx[:, j]])
    got = asnumpy(moe_ffn_grouped_kernel(*args)).astype(np.float64)
    assert np.abs(got - dense).max() / np.abs(dense).max() < (5e-3 if on_gpu else 1e-12)
    if on_gpu:
        assert (np.bincount(idx.reshape(-1), minlength=n_experts) > 64).any() or n_tokens < 64
        with pytest.raises(ValueError, match="d_ff must be a multiple of 32"):
            moe_ffn_grouped_kernel(*random_routing(4, 4, 2, 64, 40, dtype=np.float16))


def test_expert_slots_number_each_experts_tokens_from_zero():
    idx = xp.asarray([[2, 0], [2, 1], [0, 2]])
    slot, counts = expert_slots(idx, 3)
    assert asnumpy(counts).tolist() == [2, 1, 3]
    assert asnumpy(slot).tolist() == [[0, 0], [1, 0], [1, 2]]
