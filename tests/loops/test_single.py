"""Do the one-loop transformations keep the result, and does the fastmath sum vectorize?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab.loops import single


def test_single_loop_kernels_match_numpy():
    rng = np.random.default_rng()
    x = rng.standard_normal(1001)
    for kernel in (single.sum_naive, single.sum_unrolled, single.sum_vectorized):
        assert kernel(x) == pytest.approx(x.sum(), rel=1e-12, abs=1e-12)
    expected = np.convolve(np.pad(x, 1, mode="edge"), np.ones(3) / 3, mode="valid")
    for kernel in (single.smooth_branchy, single.smooth_peeled):
        np.testing.assert_allclose(kernel(x, np.empty_like(x)), expected, rtol=1e-12, atol=1e-14)
    u = rng.standard_normal((20, 30))
    reference = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    for kernel in (single.jacobi_serial, single.jacobi_parallel):
        np.testing.assert_allclose(kernel(u, np.zeros_like(u))[1:-1, 1:-1], reference, rtol=1e-12)
    fused = single.affine_relu_fused(x, 2.0, 0.5, np.empty_like(x), np.empty_like(x))
    unfused = single.affine_relu_unfused(x, 2.0, 0.5, np.empty_like(x), np.empty_like(x))
    np.testing.assert_array_equal(fused, np.maximum(2.0 * x + 0.5, 0.0))
    np.testing.assert_array_equal(unfused, fused)


def test_vectorized_sum_uses_simd_and_naive_does_not():
    """Is the fastmath loop compiled to packed SIMD adds, and the strict one not?"""
    x = np.ones(64)
    single.sum_naive(x), single.sum_vectorized(x)
    assert sum(single.vector_instructions(single.sum_vectorized).values()) > 0
    assert sum(single.vector_instructions(single.sum_naive).values()) == 0


@pytest.mark.parametrize(("line", "width"), [
    ("vmulpd\t(%rax), %ymm1, %ymm0", "ymm"),                      # memory first operand
    ("vaddpd\t32(%rsi,%rdx,8), %zmm2, %zmm3", "zmm"),             # displacement, base, index, scale
    ("vaddpd\t8(%rax,%r11,8), %ymm1, %ymm1", "ymm"),              # smooth_branchy's loop on an AVX2 CPU
    ("vfmadd231pd\t-64(%rcx,%rax,8), %ymm4, %ymm2", "ymm"),
    ("vdivpd\t%ymm0, %ymm1, %ymm1", "ymm"),                       # register operands only
    ("vaddpd\t%xmm1, %xmm0, %xmm0", "xmm"),
    ("vmulpd\t(%rdi){1to8}, %zmm1, %zmm0 {%k1}", "zmm"),          # broadcast and mask
    ("vmaxpd\t.LCPI0_0(%rip), %xmm3, %xmm3", "xmm"),
])
def test_packed_double_pattern_reads_the_destination_width(line, width):
    """Is an AT&T packed-double instruction counted once, at its destination's width, whatever its first operand?"""
    expected = {"xmm": 0, "ymm": 0, "zmm": 0} | {width: 1}
    assert single.count_vector_instructions(line) == expected


@pytest.mark.parametrize("line", [
    "vaddsd\t8(%rax), %xmm1, %xmm1",      # scalar double
    "vmovupd\t(%rax,%r11,8), %ymm1",      # a move, not arithmetic
    "vxorpd\t%xmm0, %xmm0, %xmm0",        # zeroing idiom
    "vaddps\t(%rax), %ymm1, %ymm0",       # packed single
])
def test_packed_double_pattern_ignores_other_instructions(line):
    assert sum(single.count_vector_instructions(line).values()) == 0


ASM = """\
\t.p2align\t4
.LBB0_6:
\t.loc\t1 64 0
\tvmovupd\t(%rax,%r11,8), %ymm1
\tvaddpd\t8(%rax,%r11,8), %ymm1, %ymm1
\tvdivpd\t%ymm0, %ymm1, %ymm1
\taddq\t$4, %r11
\tjne\t.LBB0_6
.LBB0_8:
\tvaddsd\t(%rax,%rdi,8), %xmm1, %xmm1
\tjne\t.LBB0_8
.LBB0_9:
\tvaddpd\t%ymm0, %ymm1, %ymm0
\tjmp\t.LBB0_6
"""


def test_hottest_vector_loop_is_the_self_loop_with_most_packed_instructions():
    loop = single.hottest_vector_loop(ASM)
    assert loop[0] == ".LBB0_6:" and loop[-1] == "jne .LBB0_6"
    assert "vaddpd 8(%rax,%r11,8), %ymm1, %ymm1" in loop and not any(line.startswith(".loc") for line in loop)
    assert single.hottest_vector_loop(".LBB0_8:\n\tvaddsd %xmm1, %xmm0, %xmm0\n\tjne .LBB0_8\n") == []


def test_both_smoothing_loops_compile_to_vector_loops():
    """Did LLVM vectorize the branchy loop too (it peels the two boundary iterations itself)?"""
    x = np.random.default_rng(0).standard_normal(64)
    for kernel in (single.smooth_branchy, single.smooth_peeled):
        kernel(x, np.empty_like(x))
        loop = single.vector_loop(kernel)
        assert sum(single.count_vector_instructions("\n".join(loop)).values()) >= 3  # two adds and a divide
        assert [line for line in loop if line.startswith("j")] == [loop[-1]]  # no branch inside: the tests are gone


def test_vector_width_is_the_widest_register_used():
    assert single.vector_width({"xmm": 3, "ymm": 1, "zmm": 0}) == "ymm"
    assert single.vector_width({"xmm": 0, "ymm": 2, "zmm": 1}) == "zmm"
    assert single.vector_width({"xmm": 0, "ymm": 0, "zmm": 0}) is None
