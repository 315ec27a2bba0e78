"""The CUDA exercise of 04_memory_hierarchy: a transpose through shared memory without bank conflicts, on the GPU.

``transpose_cuda(a)`` is the learner's launcher: a (rows, cols) float32 device array; it returns a.T as a new
(cols, rows) float32 device array, computed by the learner's kernel: 32 x 32 tiles staged in shared memory so
that both the read of ``a`` and the write of the result are coalesced, the tile padded to 32 x 33 so that the
column read is conflict-free. The cases are exact (a transpose moves numbers, it computes none) and shaped to
catch what goes wrong: no element, one, one row or one column, sizes on either side of a tile, non-square
shapes (rows and columns swapped somewhere), and a matrix of 8 M elements. Below the floor, the figure says
whether the kernel runs like the course's tile without padding (bank-conflicted) or its transpose without
shared memory (uncoalesced writes).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.exercises import Case, rng
from mlsys_lab.exercises.cuda_kernels import (
    KernelRace,
    TimedCase,
    arrays_close,
    check_kernel,
    float32_result,
    launcher,
    speed_point,
)
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy.shared_memory import transpose_on_gpu

FLOOR = 0.75  # of the course's padded kernel's speed: its unpadded tile runs at about half of it on the H200
TIMED_SHAPE = (8192, 4096)  # 2^25 elements, 256 MiB moved
EXAMPLE = np.arange(6, dtype=np.float32).reshape(2, 3)
LOOKALIKES = {
    "the course's tile without padding (bank-conflicted: pad it to 32 x 33)":
        lambda a: transpose_on_gpu(a, "transpose_shared"),
    "the course's transpose without shared memory (uncoalesced writes: stage a tile in shared memory)":
        lambda a: transpose_on_gpu(a, "transpose_naive"),
}


def _case(label: str, a: np.ndarray) -> Case:
    return Case(f"{label}: a {a.shape[0]} x {a.shape[1]}", (a,), expected=np.ascontiguousarray(a.T),
                check_result=float32_result)


def _matrix(g, rows: int, cols: int) -> np.ndarray:
    return g.standard_normal((rows, cols)).astype(np.float32)


def transpose_cases(g) -> list[Case]:
    """The example, the boundaries (empty, one element, a row, a column), either side of a tile, random shapes
    and a non-square 2049 x 4097."""
    shapes = [("one element", 1, 1), ("empty", 0, 5), ("one row", 1, 100), ("one column", 100, 1),
              ("a tile less one by a tile and one", 31, 33), ("a tile and one by a tile less one", 33, 31),
              ("one tile", 32, 32), ("odd sizes", 65, 97)]
    shapes += [("random", int(g.integers(1, 600)), int(g.integers(1, 600))) for _ in range(2)]
    shapes.append(("8 M elements, non-square", 2049, 4097))
    return [_case("the example", EXAMPLE)] + [_case(label, _matrix(g, r, c)) for label, r, c in shapes]


def transpose_timed(g) -> TimedCase:
    return TimedCase(f"a {TIMED_SHAPE[0]} x {TIMED_SHAPE[1]}", (_matrix(g, *TIMED_SHAPE),),
                     lambda a: transpose_on_gpu(a, "transpose_shared_padded"), 8 * TIMED_SHAPE[0] * TIMED_SHAPE[1],
                     FLOOR, lookalikes=LOOKALIKES)


@speed_point
def check_transpose_cuda(fn) -> None:
    """``fn(a)`` -> a.T (cols, rows), float32, on the GPU: 12 cases, exact; then timed against the course's padded
    kernel (floor 75%)."""
    g = rng()
    check_kernel("transpose_cuda", fn, lambda: transpose_cases(g), arrays_close(0.0, 0.0),
                        lambda: transpose_timed(g))


def race_transpose_cuda(fn) -> KernelRace:
    """The learner's ``transpose_cuda`` timed beside the course's kernel and a copy on this GPU ("see it")."""
    loader.require_gpu("race_transpose_cuda")
    timed = transpose_timed(rng())
    return timed.race(launcher(fn))[0]
