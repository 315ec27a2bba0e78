"""Does lesson 04's SGEMM check pass the notebook's tiled kernel, reject wrong ones and mark slow ones (the ladder's
naive and shared-memory steps, written for any shape), on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.memory_hierarchy import check_sgemm_tiled_cuda

# The notebook's solution (04_memory_hierarchy.ipynb, exercise 10.9), kernel and launcher.
SOURCE = r"""
#define BM 128  // a block computes a BM x BN tile of C
#define BN 128
#define BK 8    // staged through shared memory BK columns of A (rows of B) at a time
#define TM 8    // each thread computes a TM x TN tile of C in registers
#define TN 8
#define THREADS ((BM / TM) * (BN / TN))  // 256

extern "C" __global__ void __launch_bounds__(THREADS)
sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[BM][BK];
    __shared__ float Bs[BK][BN];
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    const int tr = threadIdx.x / (BN / TN), tc = threadIdx.x % (BN / TN);  // this thread's TM x TN tile
    float acc[TM][TN] = {};
    float a_reg[TM], b_reg[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {  // A's BM x BK slice, zero outside A
            const int r = i / BK, k = i % BK;
            As[r][k] = (row0 + r < M && k0 + k < K) ? A[(long long)(row0 + r) * K + k0 + k] : 0.0f;
        }
        for (int i = threadIdx.x; i < BK * BN; i += THREADS) {  // B's BK x BN slice, zero outside B
            const int k = i / BN, c = i % BN;
            Bs[k][c] = (k0 + k < K && col0 + c < N) ? B[(long long)(k0 + k) * N + col0 + c] : 0.0f;
        }
        __syncthreads();  // the slices are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a_reg[i] = As[tr * TM + i][k];
#pragma unroll
            for (int j = 0; j < TN; ++j) b_reg[j] = Bs[k][tc * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a_reg[i] * b_reg[j];  // an outer product
        }
        __syncthreads();  // everyone is done with the slices before the next loads overwrite them
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + tr * TM + i, c = col0 + tc * TN + j;
            if (r < M && c < N) C[(long long)r * N + c] = acc[i][j];
        }
}
"""

# Correct but slow: the ladder's step 1 with coalesced threads (one output per thread, no shared memory) and its
# step 3 (32 x 32 tiles in shared memory, one output per thread), both guarded for any shape.
NAIVE = r"""
extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    const int col = blockIdx.x * 32 + threadIdx.x % 32, row = blockIdx.y * 8 + threadIdx.x / 32;
    if (row >= M || col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc += A[(long long)row * K + k] * B[(long long)k * N + col];
    C[(long long)row * N + col] = acc;
}
"""
SMEM = r"""
extern "C" __global__ void sgemm_tiled(const float* A, const float* B, float* C, int M, int N, int K) {
    __shared__ float As[32][32], Bs[32][32];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int row = blockIdx.y * 32 + ty, col = blockIdx.x * 32 + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += 32) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[(long long)row * K + k0 + tx] : 0.0f;
        Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(long long)(k0 + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < 32; ++k) acc += As[ty][k] * Bs[k][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[(long long)row * N + col] = acc;
}
"""


def launch(kernel, a, b, tile=(128, 128), threads=256, grid_of=None):
    m, k = a.shape
    n = b.shape[1]
    out = unwritten((m, n))
    if m and n:
        grid = grid_of(m, n) if grid_of else (-(-n // tile[1]), -(-m // tile[0]))
        kernel(grid, (threads,), (a, b, out, np.int32(m), np.int32(n), np.int32(k)))
    return out


def kernel_variant(*edits, source=SOURCE, **launch_options):
    return launcher(variant(source, *edits), "sgemm_tiled", lambda kern, *a: launch(kern, *a, **launch_options))


A_LOAD = "(row0 + r < M && k0 + k < K) ? A[(long long)(row0 + r) * K + k0 + k]"
B_LOAD = "(k0 + k < K && col0 + c < N) ? B[(long long)(k0 + k) * N + col0 + c]"
REFERENCE = kernel_variant()
WRONG = {
    "no __syncthreads() after the loads: threads read slices other threads have not written yet":
        kernel_variant(("        __syncthreads();  // the slices are complete", "        // the slices are complete")),
    "one value per thread: the loads cover THREADS of A's BM x BK = 1024 values, the rest of As is stale":
        kernel_variant(("i < BM * BK; i += THREADS", "i < THREADS; i += THREADS")),
    "only multiples of the tile: the grid rounds down, partial tiles are never written":
        kernel_variant(grid_of=lambda m, n: (max(n // 128, 1), max(m // 128, 1))),
    "off by one in the K loop: k0 + BK < K, so the last slice is never added":
        kernel_variant(("k0 < K; k0 += BK", "k0 + BK < K; k0 += BK")),
    "A indexed with stride M, not K (row r read from r * M; kept inside A here)":
        kernel_variant((A_LOAD, "(row0 + r < M && k0 + k < K) ? A[((long long)(row0 + r) * M + k0 + k) % "
                                "((long long)M * K)]")),
    "B's slice loaded as if B were stored transposed: B[col * K + k]":
        kernel_variant((B_LOAD, "(k0 + k < K && col0 + c < N) ? B[(long long)(col0 + c) * K + k0 + k]")),
    "register tile indices swapped: each thread writes its 8 x 8 tile transposed":
        kernel_variant(("= acc[i][j];", "= acc[j][i];")),
    "the K edge clamped instead of zero-filled: the last column of A and row of B are added again":
        kernel_variant((A_LOAD, "(row0 + r < M) ? A[(long long)(row0 + r) * K + min(k0 + k, K - 1)]"),
                       (B_LOAD, "(col0 + c < N) ? B[(long long)min(k0 + k, K - 1) * N + col0 + c]")),
}
SLOW = {
    "one thread per output, no shared memory (the ladder's coalesced step)":
        kernel_variant(source=NAIVE, tile=(8, 32)),
    "32 x 32 shared tiles, one output per thread (the ladder's smem step, no register blocking)":
        kernel_variant(source=SMEM, tile=(32, 32), threads=1024),
}

CATALOGUES = [Catalogue("sgemm_tiled_cuda", check_sgemm_tiled_cuda, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"sgemm_tiled_cuda": SLOW})
