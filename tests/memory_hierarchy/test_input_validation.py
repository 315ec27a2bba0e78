"""Do the bank and sector models and the BF16 / attention references reject bad input by name (issue #19)?"""

import numpy as np
import pytest

from mlsys_lab.kernels.memory_hierarchy import bf16_gemm, flash_attention
from mlsys_lab.memory_hierarchy import simt
from mlsys_lab.memory_hierarchy.warp_sim import Counts


@pytest.mark.parametrize("call, text", [
    (lambda: bf16_gemm.from_bf16_bits(-1), r"bits must be 16-bit patterns in \[0, 65535\]"),
    (lambda: bf16_gemm.to_bf16_bits("ab"), r"x must be an array of numbers"),
    (lambda: bf16_gemm.gemm_reference(0, np.zeros((2, 2), np.uint16)), r"a_bits must have 2 dimensions"),
    (lambda: bf16_gemm.ldmatrix_phase_words(0), r"step must be a str or Bf16Step"),
    (lambda: bf16_gemm.Bf16Step(0, "f", "i", (1, 1, 1), 32, 0, 64, False, False), r"name must be a str"),
    (lambda: flash_attention.attention_flop(-1, 1, 128, 64, False), r"batch must be an integer >= 1"),
    (lambda: flash_attention.attention_flop(1, 1, 128, 64, 0), r"causal must be True or False"),
    (lambda: flash_attention.smem_bytes(-1), r"head_dim must be an integer >= 1"),
    (lambda: flash_attention.attention_ldmatrix_words(-0.5), r"head_dim must be an integer"),
    (lambda: flash_attention.attention_reference(0, 0, 0), r"q must have 4 dimensions"),
    (lambda: Counts(load_sectors=-1), r"load_sectors must be an integer >= 0"),
    (lambda: simt.strided_addresses(10**30), r"stride must be an integer between 0 and"),
    (lambda: simt.strided_copy_seconds(1000, 1, 0.0), r"bandwidth must be a number > 0"),
    (lambda: simt.warp_access(simt.SPACES[1], -1, 0, 4), r"stride must be an integer between 0 and"),
    (lambda: simt.sgemm_naive_addresses(0, 4, 4, coalesced=0), r"coalesced must be True or False"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_a_single_bf16_pattern_widens_to_an_array():
    assert float(bf16_gemm.from_bf16_bits(0x3F80)) == 1.0
