"""Does lesson 11's CUDA checks pass the notebook's scatter and gather, reject wrong ones and mark slow ones, on every
seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.moe import check_moe_permute_cuda, check_moe_unpermute_cuda

# The notebook's solutions (11_moe.ipynb, exercises 5 and 6), kernels and launchers.
PERMUTE_SOURCE = r"""
extern "C" __global__ void moe_scatter(const float* x, const int* expert, const int* slot, float* buffers,
                                       int n_tokens, int k, int d, int capacity) {
    const long long n_pairs = (long long)n_tokens * k;
    for (long long p = blockIdx.x; p < n_pairs; p += gridDim.x) {
        const int s = slot[p];
        if (s < 0) continue;
        const float* src = x + (p / k) * d;
        float* dst = buffers + ((long long)expert[p] * capacity + s) * d;
        for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
    }
}
"""

UNPERMUTE_SOURCE = r"""
extern "C" __global__ void moe_gather(const float* __restrict__ y, const int* __restrict__ expert,
                                      const int* __restrict__ slot, const float* __restrict__ weight,
                                      float* __restrict__ out, int n_tokens, int k, int d, int capacity) {
    const bool vec = d % 4 == 0;  // rows start 16 bytes apart: move four floats a load
    const int width = vec ? d / 4 : d;
    for (long long t = blockIdx.x; t < n_tokens; t += gridDim.x) {
        for (int c = threadIdx.x; c < width; c += blockDim.x) {
            float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (int j = 0; j < k; ++j) {
                const long long p = t * k + j;
                const int s = slot[p];
                if (s < 0) continue;
                const float w = weight[p];
                const float* row = y + ((long long)expert[p] * capacity + s) * d;
                if (vec) {
                    const float4 v = reinterpret_cast<const float4*>(row)[c];
                    acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; acc.w += w * v.w;
                } else {
                    acc.x += w * row[c];
                }
            }
            if (vec) reinterpret_cast<float4*>(out + t * d)[c] = acc;
            else out[t * d + c] = acc.x;
        }
    }
}
"""

# a thread per pair, copying its whole row: on every step the 32 threads of a warp touch 32 rows d floats apart
THREAD_PER_PAIR = (
    "    for (long long p = blockIdx.x; p < n_pairs; p += gridDim.x) {",
    "    for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < n_pairs;\n"
    "         p += (long long)gridDim.x * blockDim.x) {")
THREAD_PER_PAIR_ROW = ("for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c]", "for (int c = 0; c < d; ++c) dst[c]")


def permute_launch(kernel, x, expert, slot, n_experts, capacity, zeroed=True, threads=256, cap=4096,
                   per_thread=False):
    from mlsys_lab.backend import xp

    n_tokens, k = expert.shape
    buffers = (xp.zeros if zeroed else xp.empty)((n_experts, capacity, x.shape[1]), dtype=xp.float32)
    if n_tokens * k:
        rows = -(-n_tokens * k // threads) if per_thread else n_tokens * k
        kernel((min(rows, cap),), (threads,), (x, expert, slot, buffers, np.int32(n_tokens), np.int32(k),
                                               np.int32(x.shape[1]), np.int32(capacity)))
    return buffers


def unpermute_launch(kernel, y, expert, slot, weight, fill=True, threads=256, cap=4096, per_thread=False,
                     zeroed=False):
    from mlsys_lab.backend import xp

    n_tokens, k = expert.shape
    shape = (n_tokens, y.shape[2])
    out = xp.zeros(shape, dtype=xp.float32) if zeroed else unwritten(shape) if fill else xp.empty(shape, xp.float32)
    if n_tokens:
        rows = -(-n_tokens * k // threads) if per_thread else n_tokens * (k if zeroed else 1)
        kernel((min(rows, cap),), (threads,), (y, expert, slot, weight, out, np.int32(n_tokens), np.int32(k),
                                               np.int32(y.shape[2]), np.int32(y.shape[1])))
    return out


def permute_variant(*edits, **options):
    return launcher(variant(PERMUTE_SOURCE, *edits), "moe_scatter", lambda k, *a: permute_launch(k, *a, **options))


def unpermute_variant(*edits, **options):
    return launcher(variant(UNPERMUTE_SOURCE, *edits), "moe_gather",
                    lambda k, *a: unpermute_launch(k, *a, **options))


PERMUTE_WRONG = {
    "buffers from xp.empty: the slots nobody fills are never zeroed": permute_variant(zeroed=False),
    "the expert's offset not multiplied by d: row e · C + s · d": permute_variant(
        ("((long long)expert[p] * capacity + s) * d", "(long long)expert[p] * capacity + (long long)s * d")),
    "off by one: the last column is never copied": permute_variant(("c < d; c += blockDim.x", "c < d - 1; c += "
                                                                                                "blockDim.x")),
    "slot 0 taken for a dropped pair (s <= 0)": permute_variant(("if (s < 0) continue;", "if (s <= 0) continue;")),
    "no grid-stride loop: a grid capped at 4096 blocks leaves the pairs beyond it": permute_variant(
        ("p += gridDim.x", "p += n_pairs")),
    "token of pair p taken as p % T (choice-major), not p / k": permute_variant(("x + (p / k) * d",
                                                                                 "x + (p % n_tokens) * d")),
    "a thread per pair's grid for a block-per-pair kernel without its loop: pairs / 256 blocks": permute_variant(
        ("p += gridDim.x", "p += n_pairs"), per_thread=True),
}
PERMUTE_SLOW = {
    "a thread per pair copying its whole row (uncoalesced)": permute_variant(THREAD_PER_PAIR, THREAD_PER_PAIR_ROW,
                                                                             per_thread=True),
}

# the combine as a scatter-add: a block per pair adds weight * row into a zeroed out with atomics (the edit replaces
# the solution's whole body, from its first statement to the kernel's closing brace)
GATHER_BODY = UNPERMUTE_SOURCE[UNPERMUTE_SOURCE.index("    const bool vec"):UNPERMUTE_SOURCE.rindex("\n}")]
ATOMIC = (GATHER_BODY, """    for (long long p = blockIdx.x; p < (long long)n_tokens * k; p += gridDim.x) {
        const int s = slot[p];
        if (s < 0) continue;
        for (int c = threadIdx.x; c < d; c += blockDim.x)
            atomicAdd(out + (p / k) * d + c, weight[p] * y[((long long)expert[p] * capacity + s) * d + c]);
    }""")
UNPERMUTE_WRONG = {
    "forgets the gate weight: the k rows summed unweighted": unpermute_variant(
        ("const float w = weight[p];", "const float w = 1.0f;")),
    "gathers only the first choice": unpermute_variant(("j < k; ++j", "j < 1; ++j")),
    "slot 0 taken for a dropped pair (s <= 0)": unpermute_variant(("if (s < 0) continue;", "if (s <= 0) continue;")),
    "off by one: the last float4 (or float) of each row is never written": unpermute_variant(
        ("c < width; c += blockDim.x", "c < width - 1; c += blockDim.x")),
    "no grid-stride loop: a grid capped at 4096 blocks leaves the tokens beyond it": unpermute_variant(
        ("t += gridDim.x", "t += n_tokens")),
    "the first choice's weight for every choice": unpermute_variant(("const float w = weight[p];",
                                                                     "const float w = weight[t * k];")),
    "the float path stops at the last multiple of 4: the last d % 4 columns are never written": unpermute_variant(
        ("const int width = vec ? d / 4 : d;", "const int width = vec ? d / 4 : d / 4 * 4;")),
    "skips a token whose pairs are all dropped, into xp.empty (its row holds what the memory held)":
        unpermute_variant(("        for (int c = threadIdx.x; c < width; c += blockDim.x) {",
                           "        bool kept = false;\n"
                           "        for (int j = 0; j < k; ++j) kept |= slot[t * k + j] >= 0;\n"
                           "        if (!kept) continue;\n"
                           "        for (int c = threadIdx.x; c < width; c += blockDim.x) {"),
                          fill=False),
    "a scatter-add with atomics into xp.empty: out never zeroed": unpermute_variant(ATOMIC, fill=False),
}
UNPERMUTE_SLOW = {
    "a scatter-add with atomics into a zeroed out (a block per pair)": unpermute_variant(ATOMIC, zeroed=True),
    "a float a thread, no float4: too few bytes in flight": unpermute_variant(("const bool vec = d % 4 == 0;",
                                                                               "const bool vec = false;")),
    "a thread per token summing its whole row (uncoalesced)": unpermute_variant(
        ("    for (long long t = blockIdx.x; t < n_tokens; t += gridDim.x) {\n"
         "        for (int c = threadIdx.x; c < width; c += blockDim.x) {",
         "    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < n_tokens;\n"
         "         t += (long long)gridDim.x * blockDim.x) {\n        for (int c = 0; c < width; ++c) {"),
        per_thread=True),
}

CATALOGUES = [Catalogue("moe_permute_cuda", check_moe_permute_cuda, permute_variant(), PERMUTE_WRONG, GPU_SEEDS),
              Catalogue("moe_unpermute_cuda", check_moe_unpermute_cuda, unpermute_variant(fill=False),
                        UNPERMUTE_WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"moe_permute_cuda": PERMUTE_SLOW,
                                                     "moe_unpermute_cuda": UNPERMUTE_SLOW})
