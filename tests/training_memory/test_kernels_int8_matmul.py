"""Does the weight-only int8 matmul launcher agree with its NumPy reference and with x @ Ŵᵀ?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, on_gpu, xp
from mlsys_lab.kernels.training_memory.int8_matmul import int8_weight_matmul, int8_weight_matmul_reference
from mlsys_lab.training_memory.quantize import dequantize, quantize
from mlsys_lab.validation import relative_error


def test_reference_by_hand():
    # y = x · (scale ⊙ W)ᵀ: x = [1, 2], W rows [1, −1] and [2, 0] with scales 0.5 and 2 → [−0.5, 4]
    codes = np.array([[1, -1], [2, 0]], np.int8)
    got = int8_weight_matmul_reference(np.array([[1.0, 2.0]]), codes, np.array([0.5, 2.0]))
    np.testing.assert_array_equal(got, [[-0.5, 4.0]])


@pytest.mark.parametrize("seed", [3, 4])
def test_int8_weight_matmul_matches_reference_on_random_inputs(seed):
    """The CUDA kernel on a GPU (fp16 output), the NumPy reference elsewhere, against x @ Ŵᵀ."""
    g = np.random.default_rng(seed)
    x = g.standard_normal((int(g.integers(1, 17)), 16 * int(g.integers(1, 80)))).astype(np.float16)
    q = quantize(g.standard_normal((int(g.integers(1, 300)), x.shape[1])).astype(np.float32), 8)
    codes, scales = q.codes.astype(np.int8), q.scales[:, 0]
    exact = x.astype(np.float64) @ dequantize(q).T.astype(np.float64)
    for k_unroll, max_m in ((4, None), (1, 16), (3, None)):  # 3: K rarely a multiple of 3 x 512, the guard runs
        got = asnumpy(int8_weight_matmul(xp.asarray(x), xp.asarray(codes), xp.asarray(scales), k_unroll, max_m))
        assert relative_error(got.astype(np.float32), exact) < (2e-3 if on_gpu else 1e-5)  # fp16 output rounding
    np.testing.assert_allclose(int8_weight_matmul_reference(x, codes, scales), exact, rtol=1e-3, atol=1e-3)


def test_int8_weight_matmul_names_bad_launch_settings():
    x, codes, scales = np.zeros((3, 32), np.float16), np.zeros((5, 32), np.int8), np.ones(5, np.float32)
    with pytest.raises(ValueError, match="k_unroll must be an integer between 1 and 8"):
        int8_weight_matmul(x, codes, scales, k_unroll=0)
    with pytest.raises(ValueError, match="max_m must be an integer between 3 and 16"):
        int8_weight_matmul(x, codes, scales, max_m=2)


