"""Does lesson 06's CUDA check pass the notebook's fused softmax cross-entropy, reject wrong ones and mark slow ones,
on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.training_memory import check_softmax_xent_cuda

# The notebook's solution (06_training_memory.ipynb, exercise 7), kernel and launcher.
SOURCE = r"""
#define THREADS 1024  // one block of THREADS threads per row
#define LOWEST -3.402823466e+38f  // the most negative float: exp(LOWEST - LOWEST) is 1, not the NaN of -inf - -inf

extern "C" __global__ void softmax_xent(const float* __restrict__ logits, const int* __restrict__ labels,
                                        float* __restrict__ loss, float* __restrict__ dlogits, int n_cols) {
    // row t = blockIdx.x: loss[t] = logsumexp(z_t) - z_t[y], dlogits[t, j] = softmax(z_t)_j - (j == y)
    auto merge = [](float& m, float& s, float m2, float s2) {  // (m, s) and (m2, s2), rescaled to the larger max
        const float top = fmaxf(m, m2);
        s = s * __expf(m - top) + s2 * __expf(m2 - top);
        m = top;
    };
    __shared__ float warp_m[32], warp_s[32];
    const float* row = logits + (long long)blockIdx.x * n_cols;
    float* out = dlogits + (long long)blockIdx.x * n_cols;
    float m = LOWEST, s = 0.0f;  // pass 1: this thread's running max and its sum of exp(z - m)
    #pragma unroll 4
    for (int c = threadIdx.x; c < n_cols; c += THREADS) {  // a compile-time stride: unrolled, the loads overlap
        const float z = row[c];
        if (z > m) {
            s = s * __expf(m - z) + 1.0f;
            m = z;
        } else {
            s += __expf(z - m);
        }
    }
    for (int offset = 16; offset > 0; offset /= 2)  // the block's (m, s): across each warp, then
        merge(m, s, __shfl_xor_sync(0xffffffff, m, offset), __shfl_xor_sync(0xffffffff, s, offset));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        warp_m[warp] = m;
        warp_s[warp] = s;
    }
    __syncthreads();
    m = lane < blockDim.x / 32 ? warp_m[lane] : LOWEST;  // across the warps, in every warp
    s = lane < blockDim.x / 32 ? warp_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
        merge(m, s, __shfl_xor_sync(0xffffffff, m, offset), __shfl_xor_sync(0xffffffff, s, offset));
    const int y = labels[blockIdx.x];
    if (threadIdx.x == 0) loss[blockIdx.x] = (m - row[y]) + logf(s);
    const float inv = 1.0f / s;
    #pragma unroll 4
    for (int c = threadIdx.x; c < n_cols; c += THREADS)  // pass 2: the gradient
        out[c] = __expf(row[c] - m) * inv - (c == y ? 1.0f : 0.0f);
}
"""


def launch(kernel, logits, labels, threads=1024, grid_of=None):
    n_tokens, vocab = logits.shape
    loss, dlogits = unwritten((n_tokens,)), unwritten((n_tokens, vocab))
    if n_tokens:
        grid = grid_of(n_tokens) if grid_of else n_tokens
        kernel((grid,), (threads,), (logits, labels, loss, dlogits, np.int32(vocab)))
    return loss, dlogits


def kernel_variant(*edits, **launch_options):
    source = variant(SOURCE, *edits)
    return launcher(source, "softmax_xent", lambda k, *a: launch(k, *a, **launch_options))


def launch_thread_per_row(kernel, logits, labels):
    n_tokens, vocab = logits.shape
    loss, dlogits = unwritten((n_tokens,)), unwritten((n_tokens, vocab))
    if n_tokens:
        kernel(((n_tokens + 127) // 128,), (128,), (logits, labels, loss, dlogits, np.int32(n_tokens), np.int32(vocab)))
    return loss, dlogits


THREAD_PER_ROW = r"""
extern "C" __global__ void softmax_xent(const float* __restrict__ logits, const int* __restrict__ labels,
                                        float* __restrict__ loss, float* __restrict__ dlogits, int n_rows,
                                        int n_cols) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;  // one thread walks row t alone
    if (t >= n_rows) return;
    const float* row = logits + (long long)t * n_cols;
    float* out = dlogits + (long long)t * n_cols;
    float m = -3.402823466e+38f, s = 0.0f;
    for (int c = 0; c < n_cols; ++c) m = fmaxf(m, row[c]);
    for (int c = 0; c < n_cols; ++c) s += expf(row[c] - m);
    const int y = labels[t];
    loss[t] = (m - row[y]) + logf(s);
    for (int c = 0; c < n_cols; ++c) out[c] = expf(row[c] - m) / s - (c == y ? 1.0f : 0.0f);
}
"""

REFERENCE = kernel_variant()
WRONG = {
    "no max shift: exp(z) overflows to inf at logits of 10^4, and inf / inf is NaN": kernel_variant(
        ("        if (z > m) {\n            s = s * __expf(m - z) + 1.0f;\n            m = z;\n        } else {\n"
         "            s += __expf(z - m);\n        }",
         "        m = 0.0f;\n        s += __expf(z);")),
    "the reduction drops the tail: pass 1 covers only whole blocks of columns": kernel_variant(
        ("for (int c = threadIdx.x; c < n_cols; c += THREADS) {",
         "for (int c = threadIdx.x; c < n_cols - n_cols % THREADS; c += THREADS) {")),
    "no __syncthreads(): warps read the per-warp results before the other warps have written them":
        kernel_variant(("    __syncthreads();\n", "")),
    "reduces within each warp only: the per-warp results are never merged across warps":
        kernel_variant(("    __syncthreads();\n    m = lane < blockDim.x / 32 ? warp_m[lane] : LOWEST;"
                        "  // across the warps, in every warp\n"
                        "    s = lane < blockDim.x / 32 ? warp_s[lane] : 0.0f;\n"
                        "    for (int offset = 16; offset > 0; offset /= 2)\n"
                        "        merge(m, s, __shfl_xor_sync(0xffffffff, m, offset), __shfl_xor_sync(0xffffffff, s, "
                        "offset));\n", "")),
    "off by one at the label: the -1 lands on column y + 1": kernel_variant(("(c == y ?", "(c == y + 1 ?")),
    "forgets the one-hot: dlogits is the softmax": kernel_variant((" - (c == y ? 1.0f : 0.0f)", "")),
    "forgets the max in the loss: log s - z_y": kernel_variant(("(m - row[y]) + logf(s)", "logf(s) - row[y]")),
    "a grid-stride habit: both row loops step by gridDim.x * blockDim.x, so a thread sees one column":
        kernel_variant(("c < n_cols; c += THREADS) {", "c < n_cols; c += gridDim.x * THREADS) {"),
                       ("c < n_cols; c += THREADS)  // pass 2", "c < n_cols; c += gridDim.x * THREADS)  // pass 2")),
    "launches 256 threads for a kernel that steps by THREADS = 1024: three columns in four are never read":
        kernel_variant(threads=256),
    "one thread per logit's grid: ceil(T / 256) blocks, so most rows are never computed":
        kernel_variant(grid_of=lambda n_tokens: (n_tokens + 255) // 256),
    "wrong row stride: row t read from t * (V - 1), so every row after the first is shifted": kernel_variant(
        ("const float* row = logits + (long long)blockIdx.x * n_cols;",
         "const float* row = logits + (long long)blockIdx.x * (n_cols - 1);")),
}
SLOW = {
    "one thread per row: uncoalesced (neighbouring threads V floats apart), and T threads do not fill the GPU":
        launcher(THREAD_PER_ROW, "softmax_xent", launch_thread_per_row),
}

CATALOGUES = [Catalogue("softmax_xent_cuda", check_softmax_xent_cuda, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"softmax_xent_cuda": SLOW})
