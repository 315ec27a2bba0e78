"""Does lesson 04's CUDA check pass the notebook's transpose, reject wrong ones and mark slow ones, on every seed?"""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests
from cuda_catalogue import GPU_SEEDS, floor_tests, launcher, needs_gpu, unwritten, variant

from mlsys_lab.exercises.memory_hierarchy import check_transpose_cuda

# The notebook's solution (04_memory_hierarchy.ipynb, exercise 10.7), kernel and launcher.
SOURCE = r"""
#define TILE 32
#define ROWS 8  // a block of TILE x ROWS threads: each thread moves TILE / ROWS elements of the tile

extern "C" __global__ void transpose(const float* a, float* out, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];  // one padding column: a column of the tile spans all 32 banks
    int x = blockIdx.x * TILE + threadIdx.x;  // column of a
    int y = blockIdx.y * TILE + threadIdx.y;  // row of a
    for (int j = 0; j < TILE; j += ROWS)
        if (x < cols && y + j < rows) tile[threadIdx.y + j][threadIdx.x] = a[(long long)(y + j) * cols + x];
    __syncthreads();
    x = blockIdx.y * TILE + threadIdx.x;  // column of out = row of a
    y = blockIdx.x * TILE + threadIdx.y;  // row of out = column of a
    for (int j = 0; j < TILE; j += ROWS)
        if (x < rows && y + j < cols) out[(long long)(y + j) * rows + x] = tile[threadIdx.x][threadIdx.y + j];
}
"""


def launch(kernel, a, block=(32, 8), grid_of=None):
    rows, cols = a.shape
    out = unwritten((cols, rows))
    if a.size:
        grid = grid_of(rows, cols) if grid_of else (-(-cols // 32), -(-rows // 32))
        kernel(grid, block, (a, out, np.int32(rows), np.int32(cols)))
    return out


def kernel_variant(*edits, **launch_options):
    source = variant(SOURCE, *edits)
    return launcher(source, "transpose", lambda k, *a: launch(k, *a, **launch_options))


REFERENCE = kernel_variant()
WRONG = {
    "no __syncthreads(): the tile is read before the other warps have written it":
        kernel_variant(("    __syncthreads();\n", "")),
    "only multiples of the tile: the grid rounds down, partial tiles are never written":
        kernel_variant(grid_of=lambda rows, cols: (max(cols // 32, 1), max(rows // 32, 1))),
    "off by one: the last row of a is never read": kernel_variant(("y + j < rows) tile", "y + j < rows - 1) tile")),
    "the tile is not transposed: out gets tile[y][x]": kernel_variant(
        ("= tile[threadIdx.x][threadIdx.y + j]", "= tile[threadIdx.y + j][threadIdx.x]")),
    "grid dimensions swapped: (row tiles, column tiles)":
        kernel_variant(grid_of=lambda rows, cols: (-(-rows // 32), -(-cols // 32))),
    "a block of 32 x 4 threads for a loop written for 32 x 8: half the rows are never moved":
        kernel_variant(block=(32, 4)),
    "wrong stride: the load steps by 1, not ROWS, so rows 11 to 31 of each tile are never loaded":
        kernel_variant(("for (int j = 0; j < TILE; j += ROWS)\n        if (x < cols",
                        "for (int j = 0; j < TILE / ROWS; j += 1)\n        if (x < cols")),
    "rows and columns swapped in the write's bound: a partial tile's edge is never written": kernel_variant(
        ("if (x < rows && y + j < cols) out", "if (x < cols && y + j < rows && x < rows && y + j < cols) out")),
}
SLOW = {
    "no padding: tile[32][32], a 32-way bank conflict on every column read":
        kernel_variant(("tile[TILE][TILE + 1]", "tile[TILE][TILE]")),
    "no shared memory: reads coalesced, writes a row apart (uncoalesced)": kernel_variant(
        ("    for (int j = 0; j < TILE; j += ROWS)\n        if (x < cols && y + j < rows) tile",
         "    for (int j = 0; j < TILE; j += ROWS)\n        if (x < cols && y + j < rows) "
         "out[(long long)x * rows + y + j] = a[(long long)(y + j) * cols + x];\n"
         "    return;\n    for (int j = 0; j < TILE; j += ROWS)\n"
         "        if (x < cols && y + j < rows) tile")),
}

CATALOGUES = [Catalogue("transpose_cuda", check_transpose_cuda, REFERENCE, WRONG, GPU_SEEDS)]
test_reference_passes, test_wrong_fails = (needs_gpu(t) for t in catalogue_tests(CATALOGUES))
test_floor_met, test_slow = floor_tests(CATALOGUES, {"transpose_cuda": SLOW})
