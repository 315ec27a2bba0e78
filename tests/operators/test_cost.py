"""Operator costs against hand-worked values."""

import pytest

from mlsys_lab.hardware import GENERIC_CPU, H200
from mlsys_lab.operators import cost as ops


def test_matmul_cost_matches_the_formula_by_hand():
    """Does a 2×3 · 3×4 matmul cost 2·2·3·4 = 48 FLOP and (6 + 12 + 8)·4 = 104 bytes?"""
    cost = ops.matmul_cost(2, 4, 3)
    assert cost.flop == 48
    assert cost.n_bytes == 104
    assert cost.intensity == pytest.approx(48 / 104)
    assert cost.op_class == "tensor"


def test_square_matmul_intensity_grows_as_n_over_6():
    """For n×n×n fp32: I = 2n³ / (3n²·4) = n/6; 4096³ is 137,438,953,472 FLOP."""
    for n in (64, 1024, 8192):
        assert ops.matmul_cost(n, n, n).intensity == pytest.approx(n / 6)
    assert ops.matmul_cost(4096, 4096, 4096).flop == 2 * 4096**3 == 137_438_953_472


def test_a_matrix_vector_product_is_about_one_flop_per_byte_in_bf16():
    vec = ops.matmul_cost(1, 4096, 4096, "bf16")
    assert vec.n_bytes == 2 * (4096 + 4096 * 4096 + 4096)
    assert vec.intensity == pytest.approx(2 * 4096 * 4096 / (2 * (4096 + 4096 * 4096 + 4096)))


def test_elementwise_add_is_one_twelfth_flop_per_byte_in_fp32():
    cost = ops.elementwise_cost(1000, n_inputs=2, flop_per_element=1, dtype="fp32")
    assert cost.flop == 1000 and cost.n_bytes == 12_000
    assert cost.intensity == pytest.approx(1 / 12)
    assert ops.bound(cost, H200) == "memory-bound"


def test_tiling_raises_matmul_intensity():
    """No reuse (1×1 tiles): A and B re-read n and m times; 128×128 tiles: 128× fewer reads."""
    m = n = k = 1024
    untiled = ops.matmul_tile_traffic(m, n, k, 1, 1)
    assert untiled == 4 * (2 * m * n * k + m * n)
    tiled = ops.matmul_tile_traffic(m, n, k, 128, 128)
    assert tiled == pytest.approx(4 * (m * k * 8 + k * n * 8 + m * n))
    assert untiled / tiled > 100
    assert ops.matmul_tile_traffic(m, n, k, n, m) == ops.matmul_cost(m, n, k).n_bytes  # one tile: each matrix once


def test_conv2d_resnet_layer_by_hand():
    """ResNet-50 conv3_x 3×3, 128→128 channels, 28×28, batch 1: 2·128·28·28·128·9 = 231,211,008 FLOP."""
    cost = ops.conv2d_cost(1, 128, 128, 28, 28, kernel_size=3, stride=1, padding=1)
    assert cost.flop == 231_211_008
    assert cost.n_bytes == (128 * 28 * 28 + 128 * 128 * 9 + 128 * 28 * 28) * 4


def test_conv_output_size():
    assert ops.conv2d_output_size(224, 7, stride=2, padding=3) == 112
    with pytest.raises(ValueError, match="kernel_size"):
        ops.conv2d_output_size(2, 7)


def test_reductions_and_transforms():
    assert ops.softmax_cost(4, 8).flop == 160 and ops.softmax_cost(4, 8).n_bytes == 256
    assert ops.softmax_cost(16384, 4096).n_bytes == 2 * 4 * 16384 * 4096
    assert ops.layernorm_cost(2, 4).n_bytes == (16 + 8) * 4
    assert ops.reduction_cost(100, 10).flop == 90
    assert ops.reduction_cost(100).flop == 99 and ops.reduction_cost(100).n_bytes == 404
    assert ops.transpose_cost(10).flop == 0 and ops.transpose_cost(10, "bf16").n_bytes == 40
    assert ops.reshape_cost(10).n_bytes == 0 and ops.reshape_cost(10, contiguous=False).n_bytes == 80
    assert ops.concat_cost([3, 5], "fp32").n_bytes == 64
    assert ops.reshape_cost(10).intensity == 0.0


def test_attention_fused_bytes_are_qkvo_and_unfused_add_8_s_squared():
    fused = ops.attention_cost(1, 1, 128, 64, dtype="bf16", fused=True)
    unfused = ops.attention_cost(1, 1, 128, 64, dtype="bf16", fused=False)
    assert fused.n_bytes == 4 * 128 * 64 * 2
    assert unfused.n_bytes - fused.n_bytes == 8 * 128 * 128 * 2
    assert fused.flop == unfused.flop == 4 * 128 * 128 * 64 + 7 * 128 * 128


def test_big_matmul_is_compute_bound_on_h200_and_small_is_not():
    assert ops.bound(ops.matmul_cost(8192, 8192, 8192, "bf16"), H200, "bf16") == "compute-bound"
    assert ops.bound(ops.matmul_cost(16, 16, 16, "bf16"), H200, "bf16") == "memory-bound"
    assert ops.bound(ops.reshape_cost(16), H200) == "no work"


def test_time_lower_bound_is_the_larger_of_compute_and_memory_time():
    cost = ops.elementwise_cost(10**9, n_inputs=1)
    assert ops.time_lower_bound_seconds(cost, GENERIC_CPU) == pytest.approx(8e9 / 51.2e9)  # bytes dominate
    big = ops.matmul_cost(4096, 4096, 4096)
    assert ops.time_lower_bound_seconds(big, H200) == pytest.approx(2 * 4096**3 / 67e12)  # FLOPs dominate


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.matmul_cost(0, 4, 4), "m must be an integer >= 1"),
        (lambda: ops.matmul_cost(4, 4, 4, "fp12"), "dtype must be one of"),
        (lambda: ops.reduction_cost(10, 3), "n_outputs must divide"),
        (lambda: ops.concat_cost([]), "sizes"),
        (lambda: ops.matmul_tile_traffic(8, 8, 8, 0, 1), "tile_m"),
    ],
)
def test_bad_input_names_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
