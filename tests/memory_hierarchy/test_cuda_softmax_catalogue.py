"""Does lesson 04's softmax check pass the notebook's kernel, reject wrong ones and mark slow ones, on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.memory_hierarchy import check_softmax_rows_cuda

# The notebook's solution (04_memory_hierarchy.ipynb, exercise 10.8), kernel and launcher.
SOURCE = r"""
#define THREADS 512  // one block of THREADS threads per row
#define UNROLL 4     // elements each thread reads per step of pass 1: UNROLL loads in flight
#define LOWEST (-3.402823466e38f)  // -FLT_MAX: exp(LOWEST - m) is 0, and LOWEST - LOWEST is 0 (-inf - -inf is NaN)

extern "C" __global__ void softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
    auto merge = [](float& m, float& s, float m_other, float s_other) {  // two parts' (max, sum) as one
        const float m_new = fmaxf(m, m_other);
        s = s * __expf(m - m_new) + s_other * __expf(m_other - m_new);
        m = m_new;
    };
    __shared__ float scratch_m[THREADS / 32], scratch_s[THREADS / 32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = LOWEST, s = 0.0f;  // this thread's running max, and its sum of exp(v - m)
    for (int c0 = threadIdx.x; c0 < cols; c0 += UNROLL * THREADS) {  // pass 1: each element read once
        float v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = c0 + u * THREADS < cols ? row[c0 + u * THREADS] : LOWEST;
        float m_new = m;
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) m_new = fmaxf(m_new, v[u]);
        s *= __expf(m - m_new);  // the online rescale: the sum so far, moved to the new max
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) s += __expf(v[u] - m_new);  // a LOWEST pad adds exp(-huge) = 0
        m = m_new;
    }
    for (int offset = 16; offset > 0; offset >>= 1)  // the warp's 32 (m, s) pairs, by shuffles
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        scratch_m[warp] = m;
        scratch_s[warp] = s;
    }
    __syncthreads();
    m = lane < THREADS / 32 ? scratch_m[lane] : LOWEST;  // every warp merges the block's THREADS / 32 pairs
    s = lane < THREADS / 32 ? scratch_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
    const float inv = 1.0f / s;
#pragma unroll 4
    for (int c = threadIdx.x; c < cols; c += THREADS)  // pass 2: the row again (from L2 while it is there)
        out[c] = __expf(row[c] - m) * inv;
}
"""

# Correct but slow: the row read three times (max, sum, write), each statistic its own block reduction.
THREE_PASSES = r"""
#define THREADS 256

__device__ float block_reduce(float v, float* scratch, bool is_max) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, o) : v + o;
    }
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
    __syncthreads();
    v = (threadIdx.x & 31) < THREADS / 32 ? scratch[threadIdx.x & 31] : (is_max ? -3.402823466e38f : 0.0f);
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float o = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, o) : v + o;
    }
    __syncthreads();
    return v;
}

extern "C" __global__ void softmax_rows(const float* x, float* y, int cols) {
    __shared__ float scratch[THREADS / 32];
    const float* row = x + (long long)blockIdx.x * cols;
    float* out = y + (long long)blockIdx.x * cols;
    float m = -3.402823466e38f, s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += THREADS) m = fmaxf(m, row[c]);
    m = block_reduce(m, scratch, true);
    for (int c = threadIdx.x; c < cols; c += THREADS) s += __expf(row[c] - m);
    const float inv = 1.0f / block_reduce(s, scratch, false);
    for (int c = threadIdx.x; c < cols; c += THREADS) out[c] = __expf(row[c] - m) * inv;
}
"""

# Correct but slow: one thread per row, so a warp's 32 loads are a row apart (32 sectors a request).
THREAD_PER_ROW = r"""
extern "C" __global__ void softmax_rows(const float* x, float* y, int cols, int rows) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* row = x + (long long)r * cols;
    float m = -3.402823466e38f, s = 0.0f;
    for (int c = 0; c < cols; ++c) {
        const float v = row[c];
        if (v > m) { s = s * __expf(m - v) + 1.0f; m = v; } else { s += __expf(v - m); }
    }
    for (int c = 0; c < cols; ++c) y[(long long)r * cols + c] = __expf(row[c] - m) / s;
}
"""


def launch(kernel, x, per_row=False, threads=512):
    rows, cols = x.shape
    out = unwritten((rows, cols))
    if x.size:
        if per_row:
            kernel((-(-rows // 128),), (128,), (x, out, np.int32(cols), np.int32(rows)))
        else:
            kernel((rows,), (threads,), (x, out, np.int32(cols)))
    return out


def kernel_variant(*edits, source=SOURCE, **launch_options):
    return launcher(variant(source, *edits), "softmax_rows", lambda k, *a: launch(k, *a, **launch_options))


PASS_1 = "for (int c0 = threadIdx.x; c0 < cols; c0 += UNROLL * THREADS) {  // pass 1"
LOAD = "v[u] = c0 + u * THREADS < cols ?"
REFERENCE = kernel_variant()
WRONG = {
    "no max subtracted: exp(x) overflows to inf for x above 88, and inf / inf is NaN":
        kernel_variant(("float m = LOWEST, s = 0.0f;", "float m = 0.0f, s = 0.0f;"),
                       ("for (int u = 0; u < UNROLL; ++u) m_new = fmaxf(m_new, v[u]);", "")),
    "online rescale missing: when the max grows, the sum so far is not multiplied by exp(m_old - m_new)":
        kernel_variant(("s *= __expf(m - m_new);", "")),
    "the block's pairs merged by adding the sums, without rescaling each to the common max":
        kernel_variant(("s = s * __expf(m - m_new) + s_other * __expf(m_other - m_new);", "s = s + s_other;")),
    "no __syncthreads(): a warp reads the other warps' pairs before they are written":
        kernel_variant(("    __syncthreads();\n", "")),
    "tail dropped: pass 1 runs whole chunks only, so a partial chunk at the row's end is never read":
        kernel_variant((PASS_1, PASS_1.replace("c0 < cols;", "c0 + (UNROLL - 1) * THREADS < cols;"))),
    "off by one: the last column is left out of the max and the sum":
        kernel_variant((LOAD, LOAD.replace("< cols", "< cols - 1"))),
    "wrong stride: pass 1 steps by THREADS, not UNROLL * THREADS, so most elements are summed 4 times":
        kernel_variant((PASS_1, PASS_1.replace("c0 += UNROLL * THREADS", "c0 += THREADS"))),
    "never divided by the sum: y = exp(x - max)": kernel_variant(("out[c] = __expf(row[c] - m) * inv;",
                                                                  "out[c] = __expf(row[c] - m);")),
}
SLOW = {
    "three passes: the row is read for the max, again for the sum, again for the write":
        kernel_variant(source=THREE_PASSES, threads=256),
    "one thread per row: a warp's loads are 32 rows apart (uncoalesced), and only rows / 32 warps run":
        kernel_variant(source=THREAD_PER_ROW, per_row=True),
}

CATALOGUES = [Catalogue("softmax_rows_cuda", check_softmax_rows_cuda, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"softmax_rows_cuda": SLOW})
