"""Are the quantizers and pruners right, on hand-worked values and on random data?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, on_gpu, xp
from mlsys_lab.training_memory.quantize import (
    dequantize,
    int8_weight_matmul,
    int8_weight_matmul_reference,
    nf4_bits_per_param,
    nf4_levels,
    nf4_quantize_dequantize,
    quantize,
    quantized_matmul_error,
    relative_error,
)
from mlsys_lab.training_memory.sparsity import csr_bytes, dense_bytes, prune_n_m, prune_unstructured, two_four_bytes

# bitsandbytes' NF4 code (functional.py, get_4bit_type("nf4")), as printed in the QLoRA appendix.
NF4_PUBLISHED = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
                 -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
                 0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
                 0.7229568362236023, 1.0]


def test_hand_worked_symmetric_and_asymmetric():
    w = np.array([[-1.0, 0.5, 0.25, 1.0]])
    q = quantize(w, 2, "symmetric", "tensor")  # levels −1, 0, 1 × scale 1
    np.testing.assert_array_equal(q.codes, [[-1, 0, 0, 1]])  # 0.5 rounds to even
    q = quantize(np.array([[0.0, 1.0, 2.0, 3.0]]), 2, "asymmetric", "tensor")  # scale 1, zero 0
    np.testing.assert_array_equal(dequantize(q), [[0.0, 1.0, 2.0, 3.0]])


def test_error_falls_with_bits_and_finer_groups():
    w = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    errors = [relative_error(dequantize(quantize(w, b)), w) for b in (2, 4, 8)]
    assert errors[0] > errors[1] > errors[2]
    # each bit halves the step: 4 more bits ≈ 16× less error
    assert 10 < errors[1] / errors[2] < 25
    tensor, channel, group = (relative_error(dequantize(quantize(w, 4, "symmetric", g, 32)), w)
                              for g in ("tensor", "channel", "group"))
    assert tensor > channel > group


def test_storage_bytes():
    q = quantize(np.ones((4, 256)), 4, "symmetric", "group", 64)
    assert q.storage_bytes == 4 * 256 / 2 + 16 * 2
    with pytest.raises(ValueError, match="group_size"):
        quantize(np.ones((4, 100)), 4, "symmetric", "group", 64)


def test_nf4_levels_match_bitsandbytes_and_beat_int4_on_normal_weights():
    np.testing.assert_allclose(nf4_levels(), NF4_PUBLISHED, atol=1e-6)
    w = np.random.default_rng(1).standard_normal((128, 256)).astype(np.float32)
    int4 = quantize(w, 4, "symmetric", "group", 64)
    assert relative_error(nf4_quantize_dequantize(w, 64), w) < relative_error(dequantize(int4), w)
    assert nf4_bits_per_param(64, double_quant=False) == 4.5
    assert nf4_bits_per_param() == pytest.approx(4.127, abs=1e-3)  # QLoRA §3: 0.127 bits of constants


def test_activation_quantization_adds_error_with_outlier_features():
    g = np.random.default_rng(2)
    x, w = g.standard_normal((32, 256)), g.standard_normal((64, 256)) * 0.02
    x[:, :3] *= 60  # a few large feature dimensions, as LLM.int8 observed
    assert quantized_matmul_error(x, w, 8, activations=True) > 2 * quantized_matmul_error(x, w, 8)


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


def test_two_four_pattern_and_unstructured_sparsity():
    w = np.array([[4.0, -1.0, 3.0, 0.5, 1.0, 2.0, -3.0, 0.1]])
    np.testing.assert_array_equal(prune_n_m(w), [[4.0, 0, 3.0, 0, 0, 2.0, -3.0, 0]])
    big = np.random.default_rng(4).standard_normal((32, 64))
    pruned = prune_n_m(big)
    assert (np.count_nonzero(pruned.reshape(32, -1, 4), axis=2) == 2).all()
    unstructured = prune_unstructured(big, 0.5)
    assert np.count_nonzero(unstructured) == big.size // 2
    # at equal sparsity magnitude pruning anywhere loses less than 2 of every 4
    assert relative_error(unstructured, big) < relative_error(pruned, big)


def test_sparse_storage_sizes():
    w = np.zeros((4, 8))
    w[0, :4] = 1.0
    assert csr_bytes(w, 2, 4) == 4 * 6 + 5 * 4
    assert two_four_bytes((4, 8), 2) == 16 * 2 + 16 * 2 / 8
    assert dense_bytes((4, 8), 2) == 64
    with pytest.raises(ValueError, match="divisible by 4"):
        two_four_bytes((4, 6))
