"""Does lesson 04's tensor-core check pass the notebook's BF16 mma.sync kernel, reject wrong ones and mark a slow one
(FP32 FMAs on the CUDA cores), on every seed? The kernels need compute capability 8.0: below it (a T4) they are
skipped with the reason, and the check's refusal is tested on any machine in test_mma_exercise.py."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, unwritten, variant

from mlsys_lab import backend
from mlsys_lab.exercises.memory_hierarchy import check_bf16_mma_cuda
from mlsys_lab.exercises.memory_hierarchy_mma_cuda import gradable_here
from mlsys_lab.kernels.learner import without_markers
from mlsys_lab.memory_hierarchy.tensor_cores import mma_shapes

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_memory_hierarchy.ipynb"
needs_sm80 = pytest.mark.skipif(not gradable_here(), reason="the BF16 mma.sync exercise needs a CUDA GPU of compute "
                                f"capability 8.0 or newer ({backend.describe()})")

# The notebook's solution (04_memory_hierarchy.ipynb, the BF16 tensor-core exercise): the source above the solution
# region (the PTX wrappers the learner is given), the kernel's body, and the launcher.
HEAD = r"""
typedef unsigned short bf16_t;  // a bfloat16's 16 bits: the arrays are uint16 (NumPy has no bfloat16)
#define BM 64       // a block computes a BM x BN tile of C,
#define BN 64
#define BK 32       // staging BK columns of A and of B (K-major) at a time
#define LD (BK + 8) // a shared row: 40 bf16 = 80 bytes; the 8 rows one ldmatrix phase reads fall on 8 bank groups
#define THREADS 128 // 4 warps as 2 x 2, each a 32 x 32 warp tile: 2 x 4 mma tiles of 16 x 8

// ---- PTX, ready to use (as in mlsys_lab/kernels/memory_hierarchy/tensor_core_ptx.cuh)
__device__ __forceinline__ unsigned smem_u32(const void* p) {  // a pointer into shared memory -> its address
    unsigned r;
    asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
    return r;
}
// ldmatrix .x4: four 8 x 8 matrices of bf16. Lane l gives the address of row l % 8 of matrix l / 8 (16 bytes,
// 16-byte aligned); each lane receives, of matrix q, row lane / 4, columns 2 (lane % 4) and + 1, in r[q].
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// ldmatrix .x2: two 8 x 8 matrices; lanes 0-15 give the row addresses (lanes 16-31: any valid address).
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
// d (16 x 8, fp32) += a (16 x 16, bf16, row-major) . b (16 x 8, bf16, "col": stored as 8 rows of 16 k): one warp.
// a: {rows 0-7 k 0-7, rows 8-15 k 0-7, rows 0-7 k 8-15, rows 8-15 k 8-15}; b: {k 0-7, k 8-15} of its 8 rows.
// d: lane holds rows lane / 4 (d[0], d[1]) and lane / 4 + 8 (d[2], d[3]), columns 2 (lane % 4) and + 1.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

extern "C" __global__ void __launch_bounds__(THREADS)
bf16_mma(const bf16_t* A, const bf16_t* B, float* C, int M, int N, int K) {
    // C (M x N) = A (M x K) . B (N x K)^T. Block (blockIdx.x, blockIdx.y): the tile of C at rows BM * blockIdx.y,
    // columns BN * blockIdx.x. M, N are multiples of 64 and K of 32 (the launcher checks it).
"""
BODY = r"""
    __shared__ __align__(16) bf16_t as[BM * LD];  // A's BM x BK slice, row r at as + r * LD
    __shared__ __align__(16) bf16_t bs[BN * LD];  // B's BN x BK slice: row n holds column n of C's k values
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wr = (warp / 2) * 32, wc = (warp % 2) * 32;  // this warp's 32 x 32 tile in the block's
    float acc[2][4][4] = {};  // [16-row tile i][8-column tile j][the fragment's 4 values]
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int t = threadIdx.x; t < BM * BK / 8; t += THREADS) {  // 16-byte chunks: 8 bf16, 4 per row
            const int r = t / (BK / 8), c = (t % (BK / 8)) * 8;
            *reinterpret_cast<uint4*>(as + r * LD + c) =
                *reinterpret_cast<const uint4*>(A + (long long)(row0 + r) * K + k0 + c);
            *reinterpret_cast<uint4*>(bs + r * LD + c) =
                *reinterpret_cast<const uint4*>(B + (long long)(col0 + r) * K + k0 + c);
        }
        __syncthreads();  // the slices are complete before any warp reads them
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[2][4], b[4][2];
            for (int i = 0; i < 2; ++i)  // lanes 0-15: rows 0-15 at kk; lanes 16-31: the same rows at kk + 8
                ldmatrix_x4(a[i], smem_u32(as + (wr + i * 16 + lane % 16) * LD + kk + (lane / 16) * 8));
            for (int j = 0; j < 4; ++j)  // lanes 0-7: B rows 0-7 at kk; lanes 8-15: the same rows at kk + 8
                ldmatrix_x2(b[j], smem_u32(bs + (wc + j * 8 + lane % 8) * LD + kk + (lane / 8) % 2 * 8));
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], a[i], b[j]);
        }
        __syncthreads();  // every warp is done with the slices before the next loads overwrite them
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) {  // rows g and g + 8, columns 2 t and 2 t + 1 (g = lane / 4, t = lane % 4)
            const int r = row0 + wr + i * 16 + lane / 4, c = col0 + wc + j * 8 + 2 * (lane % 4);
            *reinterpret_cast<float2*>(C + (long long)r * N + c) = make_float2(acc[i][j][0], acc[i][j][1]);
            *reinterpret_cast<float2*>(C + (long long)(r + 8) * N + c) = make_float2(acc[i][j][2], acc[i][j][3]);
        }
"""
SCALAR_BODY = r"""
    __shared__ float as[BK][BM + 1];  // as[k][row]: A's slice widened to float, transposed
    __shared__ float bs[BK][BN + 1];  // bs[k][n]
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int tc = threadIdx.x % BN, tr = (threadIdx.x / BN) * (BM / 2);  // 32 outputs of one column per thread
    float acc[BM / 2] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int t = threadIdx.x; t < BM * BK; t += THREADS) {
            const int r = t / BK, c = t % BK;
            as[c][r] = __uint_as_float((unsigned)A[(long long)(row0 + r) * K + k0 + c] << 16);
            bs[c][r] = __uint_as_float((unsigned)B[(long long)(col0 + r) * K + k0 + c] << 16);
        }
        __syncthreads();
        for (int kk = 0; kk < BK; ++kk) {
            const float b = bs[kk][tc];
#pragma unroll
            for (int i = 0; i < BM / 2; ++i) acc[i] = fmaf(as[kk][tr + i], b, acc[i]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < BM / 2; ++i) C[(long long)(row0 + tr + i) * N + col0 + tc] = acc[i];
"""
SOURCE = HEAD + BODY + "}\n"
RNE_BF16 = ("#define THREADS 128", "#define THREADS 128\n#define BF16(x) __uint_as_float((__float_as_uint(x) + 0x7FFFu "
            "+ ((__float_as_uint(x) >> 16) & 1u)) & 0xFFFF0000u)  // x rounded to the nearest BF16")


def launch(kernel, a, b, threads=128, operands_swapped=False):
    """The notebook's launcher (its shape check is :func:`mma_shapes`), into a NaN-filled C (:func:`unwritten`)."""
    m, n, k = mma_shapes(a, b)
    c = unwritten((m, n))
    if operands_swapped:  # the kernel given (B, A) and (N, M): it computes B · Aᵀ, C's transpose, into C's buffer
        kernel((m // 64, n // 64), (threads,), (b, a, c, np.int32(n), np.int32(m), np.int32(k)))
    else:
        kernel((n // 64, m // 64), (threads,), (a, b, c, np.int32(m), np.int32(n), np.int32(k)))
    return c


def kernel_variant(*edits, source=SOURCE, **launch_options):
    return launcher(variant(source, *edits), "bf16_mma", lambda kernel, *args: launch(kernel, *args, **launch_options))


REFERENCE = kernel_variant()
WRONG = {
    "no __syncthreads() around the MMAs: warps read slices the others have not written yet, and overwrite slices "
    "the others still read": kernel_variant(("        __syncthreads();  // the slices", "        // the slices"),
                                            ("        __syncthreads();  // every warp", "        // every warp")),
    "no __syncthreads() after the loads: a warp's ldmatrix reads rows the other warps have not stored yet":
        kernel_variant(("        __syncthreads();  // the slices", "        // the slices")),
    "the fragment's rows swapped in the epilogue: d[0], d[1] written to row g + 8, d[2], d[3] to row g":
        kernel_variant(("(C + (long long)r * N + c) = make_float2(acc[i][j][0], acc[i][j][1])",
                        "(C + (long long)r * N + c) = make_float2(acc[i][j][2], acc[i][j][3])"),
                       ("(C + (long long)(r + 8) * N + c) = make_float2(acc[i][j][2], acc[i][j][3])",
                        "(C + (long long)(r + 8) * N + c) = make_float2(acc[i][j][0], acc[i][j][1])")),
    "the fragment's row as lane % 8, where lane l holds rows l / 4 and l / 4 + 8":
        kernel_variant(("i * 16 + lane / 4, c", "i * 16 + lane % 8, c")),
    "the inner loop stops at 16 of the slice's 32 k: half the products":
        kernel_variant(("for (int kk = 0; kk < BK; kk += 16)", "for (int kk = 0; kk < BK / 2; kk += 16)")),
    "B's fragments through ldmatrix .trans (B's rows are already its n rows of k: no transpose)":
        kernel_variant(("ldmatrix.sync.aligned.m8n8.x2.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16")),
    "A's fragments all at kk: lanes 16-31 point at the same k as lanes 0-15, the k + 8 half is never loaded":
        kernel_variant((" * LD + kk + (lane / 16) * 8));", " * LD + kk));")),
    "the last K slice dropped: k0 + BK < K":
        kernel_variant(("for (int k0 = 0; k0 < K; k0 += BK)", "for (int k0 = 0; k0 + BK < K; k0 += BK)")),
    "warp tiles 16 rows apart for 32-row tiles: they overlap, rows 48-63 of each block are never computed":
        kernel_variant(("const int wr = (warp / 2) * 32", "const int wr = (warp / 2) * 16")),
    "C rounded to BF16 before the store (as the course's ladder stores it), where the exercise returns FP32":
        kernel_variant(RNE_BF16, ("make_float2(acc[i][j][0], acc[i][j][1])", "make_float2(BF16(acc[i][j][0]), "
                                                                           "BF16(acc[i][j][1]))"),
                       ("make_float2(acc[i][j][2], acc[i][j][3])", "make_float2(BF16(acc[i][j][2]), "
                                                                   "BF16(acc[i][j][3]))")),
    "the operands swapped in the launch: (B, A) and (N, M) give B · Aᵀ, C's transpose":
        kernel_variant(operands_swapped=True),
    "2 warps launched for a kernel written for 4: half the slices never loaded, half the warp tiles never computed":
        kernel_variant(threads=64),
}
SLOW = {
    "no tensor cores: FP32 FMAs over the BF16 values, 32 outputs per thread from shared tiles":
        kernel_variant(source=HEAD + SCALAR_BODY + "}\n"),
}

CATALOGUES = [Catalogue("bf16_mma_cuda", check_bf16_mma_cuda, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_sm80(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = (needs_sm80(t) for t in floor_tests(CATALOGUES, {"bf16_mma_cuda": SLOW}))


def notebook_source() -> str | None:
    """The exercise cell's kernel source as the notebook has it (markers blanked), or None before it is there."""
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    found = [c.source for c in cells if c.cell_type == "code" and "def bf16_mma_cuda(" in c.source]
    if not found:
        return None
    return without_markers(re.search(r'BF16_MMA_SOURCE = r"""\n(.*?)"""', found[0], re.DOTALL).group(1))


def test_catalogue_source_is_the_notebooks():
    """Is the kernel this catalogue proves the one the notebook's exercise cell holds (blank lines aside)?"""
    source = notebook_source()
    if source is None:
        pytest.skip("the notebook has no bf16_mma_cuda exercise cell")

    def lines(text: str) -> list[str]:
        return [line.rstrip() for line in text.splitlines() if line.strip()]

    assert lines(source) == lines(SOURCE)
