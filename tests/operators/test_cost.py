"""Operator costs against hand-worked values."""

import pytest

from mlsys_lab.hardware import GENERIC_CPU, H200
from mlsys_lab.operators import cost as ops


def test_matmul_cost_matches_the_formula_by_hand():
    """Does a 2×3 · 3×4 matmul cost 2·2·3·4 = 48 FLOP and (6 + 12 + 8)·4 = 104 bytes?"""
    cost = ops.matmul_cost(2, 4, 3)
    assert cost.flops == 48
    assert cost.bytes == 104
    assert cost.intensity == pytest.approx(48 / 104)
    assert cost.op_class == "tensor"


def test_square_matmul_intensity_grows_as_n_over_6():
    """For n×n×n fp32: I = 2n³ / (3n²·4) = n/6."""
    for n in (64, 1024, 8192):
        assert ops.matmul_cost(n, n, n).intensity == pytest.approx(n / 6)


def test_elementwise_add_is_one_twelfth_flop_per_byte_in_fp32():
    cost = ops.elementwise_cost(1000, n_inputs=2, flops_per_element=1, bytes_per_element=4)
    assert cost.intensity == pytest.approx(1 / 12)
    assert ops.bound(cost, H200) == "memory-bound"


def test_conv2d_resnet_layer_by_hand():
    """ResNet-50 conv3_x 3×3, 128→128 channels, 28×28, batch 1: 2·128·28·28·128·9 = 231,211,008 FLOP."""
    cost = ops.conv2d_cost(1, 128, 128, 28, 28, kernel_size=3, stride=1, padding=1)
    assert cost.flops == 231_211_008
    assert cost.bytes == (128 * 28 * 28 + 128 * 128 * 9 + 128 * 28 * 28) * 4


def test_conv_output_size():
    assert ops.conv2d_output_size(224, 7, stride=2, padding=3) == 112
    with pytest.raises(ValueError, match="kernel_size"):
        ops.conv2d_output_size(2, 7)


def test_reductions_and_transforms():
    assert ops.softmax_cost(4, 8).flops == 160 and ops.softmax_cost(4, 8).bytes == 256
    assert ops.layernorm_cost(2, 4).bytes == (16 + 8) * 4
    assert ops.reduction_cost(100, 10).flops == 90
    assert ops.transpose_cost(10).flops == 0 and ops.transpose_cost(10, 2).bytes == 40
    assert ops.reshape_cost(10).bytes == 0 and ops.reshape_cost(10, contiguous=False).bytes == 80
    assert ops.concat_cost([3, 5], 4).bytes == 64
    assert ops.reshape_cost(10).intensity == 0.0


def test_attention_fused_bytes_are_qkvo_and_unfused_add_8_s_squared():
    fused = ops.attention_cost(1, 1, 128, 64, bytes_per_element=2, fused=True)
    unfused = ops.attention_cost(1, 1, 128, 64, bytes_per_element=2, fused=False)
    assert fused.bytes == 4 * 128 * 64 * 2
    assert unfused.bytes - fused.bytes == 8 * 128 * 128 * 2
    assert fused.flops == unfused.flops == 4 * 128 * 128 * 64 + 7 * 128 * 128


def test_big_matmul_is_compute_bound_on_h200_and_small_is_not():
    assert ops.bound(ops.matmul_cost(8192, 8192, 8192, 2), H200, "bf16") == "compute-bound"
    assert ops.bound(ops.matmul_cost(16, 16, 16, 2), H200, "bf16") == "memory-bound"


def test_time_lower_bound_is_the_larger_of_compute_and_memory_time():
    cost = ops.elementwise_cost(10**9, n_inputs=1)
    assert ops.time_lower_bound_seconds(cost, GENERIC_CPU) == pytest.approx(8e9 / 51.2e9)


def test_catalogue_covers_the_four_classes():
    classes = {ops.catalogue_cost(name, 256).op_class for name in ops.CATALOGUE}
    assert classes == set(ops.OP_CLASSES)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.matmul_cost(0, 4, 4), "m must be an integer >= 1"),
        (lambda: ops.matmul_cost(4, 4, 4, bytes_per_element=0), "bytes_per_element"),
        (lambda: ops.catalogue_cost("fft", 8), "op_name must be one of"),
        (lambda: ops.bytes_per_element("fp7"), "dtype must be one of"),
        (lambda: ops.reduction_cost(10, 3), "n_outputs must divide"),
        (lambda: ops.concat_cost([]), "sizes"),
    ],
)
def test_bad_input_names_the_parameter(call, match):
    with pytest.raises(ValueError, match=match):
        call()
