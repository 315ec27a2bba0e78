"""Does lesson 03's CUDA check pass the notebook's reduction, reject wrong ones and mark slow ones, on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, grid_for, launcher, needs_gpu, variant

from mlsys_lab.exercises.roofline import check_reduce_sum

# The notebook's solution (03_roofline.ipynb, exercise 6.6), kernel and launcher.
SOURCE = r"""
extern "C" __global__ void reduce_sum(const float* x, float* out, long long n) {
    __shared__ float warp_sums[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float acc = 0.0f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += x[i];
    for (int offset = 16; offset > 0; offset /= 2)
        acc += __shfl_down_sync(0xffffffff, acc, offset);
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset /= 2)
            acc += __shfl_down_sync(0xffffffff, acc, offset);
        if (lane == 0) atomicAdd(out, acc);
    }
}
"""


def launch(kernel, x, threads=256, cap=1024, whole_blocks=False, zeroed=True):
    from mlsys_lab.backend import xp

    out = xp.zeros(1, dtype=xp.float32) if zeroed else xp.full(1, 1.0, dtype=xp.float32)
    if x.size:
        blocks = max(x.size // threads, 1) if whole_blocks else grid_for(x.size, threads, cap)
        kernel((blocks,), (threads,), (x, out, np.int64(x.size)))
    return out


def kernel_variant(*edits, **launch_options):
    source = variant(SOURCE, *edits)
    return launcher(source, "reduce_sum", lambda k, *a: launch(k, *a, **launch_options))


REFERENCE = kernel_variant()
WRONG = {
    "no __syncthreads(): warp 0 reads the other warps' sums before they are written":
        kernel_variant(("    __syncthreads();\n", "")),
    "tail dropped: the loop stops at the last multiple of 256":
        kernel_variant(("i < n; i +=", "i < n / 256 * 256; i +=")),
    "off by one: the loop starts at element 1": kernel_variant(("threadIdx.x; i < n", "threadIdx.x + 1; i < n")),
    "shuffle stops at offset 2: lane 1's value is never added":
        kernel_variant(("for (int offset = 16; offset > 0; offset /= 2)\n        acc",
                        "for (int offset = 16; offset > 1; offset /= 2)\n        acc")),
    "wrong stride: blockDim.x, so blocks overlap and elements are counted again":
        kernel_variant(("i += (long long)gridDim.x * blockDim.x", "i += blockDim.x")),
    "only warp 0's sum: the warps' partials are never combined": kernel_variant(
        ("acc = lane < blockDim.x / 32 ? warp_sums[lane] : 0.0f;", "acc = lane == 0 ? warp_sums[0] : 0.0f;")),
    "only multiples of the block: n / 256 blocks, one element each": kernel_variant(
        ("i += (long long)gridDim.x * blockDim.x", "i += n"), whole_blocks=True),
    "out not zeroed before the atomics (it holds 1 from before)": kernel_variant(zeroed=False),
}
SLOW = {
    "uncoalesced: each thread sums a contiguous chunk of x": kernel_variant(
        ("    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x "
         "* blockDim.x)\n        acc += x[i];",
         "    const long long threads = (long long)gridDim.x * blockDim.x, chunk = (n + threads - 1) / threads;\n"
         "    const long long first = (blockIdx.x * (long long)blockDim.x + threadIdx.x) * chunk;\n"
         "    for (long long i = first; i < first + chunk && i < n; ++i)\n        acc += x[i];")),
    "one block of 256 threads for the whole array": kernel_variant(cap=1),
}

CATALOGUES = [Catalogue("reduce_sum", check_reduce_sum, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"reduce_sum": SLOW})
