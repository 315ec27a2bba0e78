"""Do quantization and sparsity byte counts reject bad input by name (issue #19)?"""

import importlib
import math

import numpy as np
import pytest

from mlsys_lab.training_memory import sparsity

quantize = importlib.import_module("mlsys_lab.training_memory.quantize")  # the package re-exports quantize()


@pytest.mark.parametrize("call, text", [
    (lambda: quantize.quantize("ab"), r"w must be an array of numbers"),
    (lambda: quantize.quantize(np.full((4, 4), math.nan)), r"w must hold finite numbers"),
    (lambda: quantize.nf4_levels(offset=0.0), r"offset must be a number in \(0.5, 1.0\)"),
    (lambda: quantize.nf4_bits_per_param(double_quant=0), r"double_quant must be True or False"),
    (lambda: quantize.nf4_quantize_dequantize(0), r"w.size must be a multiple of block_size=64"),
    (lambda: quantize.quantized_matmul_error(0, np.ones((4, 4))), r"x must have 2 dimensions"),
    (lambda: quantize.Quantized(np.zeros((1, 4), np.int16), np.ones((1, 1)), None, -1, 4), r"bits must be an integer"),
    (lambda: quantize.Quantized(np.zeros((2, 4), np.int16), np.ones((1, 1)), None, 8, 4),
     r"scales must hold one scale per group of group_size=4 codes"),
    (lambda: sparsity.csr_bytes(np.eye(4), value_bytes=-0.5), r"value_bytes must be an integer >= 1"),
    (lambda: sparsity.two_four_bytes(0), r"shape must be a \(rows, cols\) pair"),
    (lambda: sparsity.two_four_bytes((4, 8), value_bytes=-1), r"value_bytes must be an integer >= 1"),
    (lambda: sparsity.prune_unstructured(np.full(4, math.nan), 0.5), r"w must hold finite numbers"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()
