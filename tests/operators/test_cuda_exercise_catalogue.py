"""Does lesson 01's CUDA check pass the notebook's kernel, reject wrong kernels and mark slow ones, on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, grid_for, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.operators import check_bias_gelu

# The notebook's solution (01_operators.ipynb, exercise 7), kernel and launcher.
SOURCE = r"""
extern "C" __global__ void bias_gelu(const float* x, const float* bias, float* out, float scale,
                                     long long n, int width) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i] + bias[i % width];
        const float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
        out[i] = scale * (0.5f * v * (1.0f + tanhf(inner)));
    }
}
"""


def launch(kernel, x, bias, scale, threads=256, cap=4096):
    out = unwritten(x.shape)
    if x.size:
        kernel((grid_for(x.size, threads, cap),), (threads,),
               (x, bias, out, np.float32(scale), np.int64(x.size), np.int32(x.shape[1])))
    return out


def kernel_variant(*edits, **launch_options):
    source = variant(SOURCE, *edits)
    return launcher(source, "bias_gelu", lambda k, *a: launch(k, *a, **launch_options))


REFERENCE = kernel_variant()
WRONG = {
    "bias indexed by row, not column": kernel_variant(("bias[i % width]", "bias[(i / width) % width]")),
    "no grid-stride loop: one element per thread in a grid capped at 4096 blocks":
        kernel_variant(("; i < n; i += stride)", "; i < n; i += n)")),
    "stride forgets the block index: every block repeats block 0's elements":
        kernel_variant(("i = blockIdx.x * (long long)blockDim.x + threadIdx.x", "i = threadIdx.x")),
    "tail dropped: the loop stops at the last multiple of 256":
        kernel_variant(("i < n; i += stride", "i < n / 256 * 256; i += stride")),
    "off by one: the last element is never written": kernel_variant(("i < n; i += stride", "i < n - 1; i += stride")),
    "scale inside the GELU": kernel_variant(("const float v = x[i] + bias[i % width];",
                                             "const float v = scale * (x[i] + bias[i % width]);"),
                                            ("out[i] = scale * (", "out[i] = (")),
    "GELU without the cubic term": kernel_variant(("(v + 0.044715f * v * v * v)", "v")),
    "integer scale: (int)scale truncates 1.5 to 1": kernel_variant(("out[i] = scale * (", "out[i] = (int)scale * (")),
    "sigmoid GELU, x·σ(1.702x), instead of the tanh form": kernel_variant(
        ("0.5f * v * (1.0f + tanhf(inner))", "v / (1.0f + expf(-1.702f * v))")),
}
SLOW = {
    "uncoalesced: thread i walks the matrix by column (neighbours a row apart)": kernel_variant(
        ("const float v = x[i] + bias[i % width];\n        const float inner",
         "const long long rows = n / width, j = (i % rows) * width + i / rows;\n"
         "        const float v = x[j] + bias[j % width];\n        const float inner"),
        ("out[i] = scale", "out[j] = scale")),
    "one block of 256 threads for the whole array": kernel_variant(cap=1),
}

CATALOGUES = [Catalogue("bias_gelu", check_bias_gelu, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"bias_gelu": SLOW})
