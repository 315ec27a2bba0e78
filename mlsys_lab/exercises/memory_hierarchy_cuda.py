"""The CUDA exercises of 04_memory_hierarchy, checked and timed on the GPU: a transpose, a row softmax, an SGEMM.

``transpose_cuda(a)`` (10.7): a (rows, cols) float32 device array; it returns a.T as a new (cols, rows) float32
device array, computed by the learner's kernel: 32 x 32 tiles staged in shared memory so that both the read of
``a`` and the write of the result are coalesced, the tile padded to 32 x 33 so that the column read is
conflict-free. The cases are exact (a transpose moves numbers, it computes none) and shaped to catch what goes
wrong: no element, one, one row or one column, sizes on either side of a tile, non-square shapes (rows and columns
swapped somewhere), and a matrix of 8 M elements. Below the floor, the figure says whether the kernel runs like the
course's tile without padding (bank-conflicted) or its transpose without shared memory (uncoalesced writes).

``softmax_rows_cuda(x)`` (10.8): the softmax of each row of any width, one block per row, the statistics in one read
(the online max and rescaled sum of Milakov and Gimelshein, 2018), the write in a second; within 1e-4 relative of
the float64 softmax, timed on 2048 x 16384 against the course's ``softmax_rows`` (one read, one write; 8 bytes an
element counted).

``sgemm_tiled_cuda(a, b)`` (10.9): C = A @ B in FP32 for any M, N, K, the SGEMM ladder's ``blocktile_2d`` step with
guarded edges; each element within (sqrt(K) + 1) * eps32 * (|A| @ |B|) of the float64 product, timed at 4096^3
against ``blocktile_2d`` and cuBLAS (2 M N K FLOPs counted). Below the floor, the figure names the ladder step the
kernel runs like.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.exercises import Case, rng, short
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
from mlsys_lab.kernels.memory_hierarchy.fused import softmax_reference, softmax_rows
from mlsys_lab.kernels.memory_hierarchy.sgemm import sgemm, sgemm_reference
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


# ------------------------------------------------------------------ 10.8 · a row softmax with online statistics
# Of the float64 softmax: __expf is good to about 1e-6, and a sum rescaled at every step of a long rising row drifts
# by up to a few 1e-5 (one thread per row, 4999 steps: 2e-5); the atol only forgives values below 1e-12.
SOFTMAX_RTOL, SOFTMAX_ATOL = 1e-4, 1e-12
SOFTMAX_FLOOR = 0.6  # of the course's softmax_rows (one read, one write); three reads run at 49% of it on the H200
SOFTMAX_TIMED_SHAPE = (2048, 16384)  # 128 MiB read, 128 MiB written (one message each way); 64 KB rows
SOFTMAX_EXAMPLE = np.array([[1, 2, 3], [1000, 1000, 1000]], dtype=np.float32)
SOFTMAX_SLOW_HINT = ("a correct softmax this slow usually reads each row three times (a max pass, a sum pass, a "
                     "write pass) where the online (max, sum) needs one read for the statistics, or gives each "
                     "thread a whole row, so that a warp's loads are 32 rows apart (uncoalesced)")


def _softmax_case(label: str, x: np.ndarray) -> Case:
    expected = softmax_reference(x) if x.size else np.zeros_like(x)  # no row: nothing to normalise
    return Case(f"{label}: x {x.shape[0]} x {x.shape[1]}", (x,), expected=expected, check_result=float32_result)


def softmax_cases(g) -> list[Case]:
    """The example; the boundaries (no row, one element, one column); widths off the block and off 4; rows of
    +-1e4 (exp overflows without the max); equal values; increasing rows (the max grows at every element, so a
    sum that is not rescaled is wrong); many rows of different scales; a row of 50257 (a vocabulary)."""

    def normal(rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (scale * g.standard_normal((rows, cols))).astype(np.float32)

    scales = g.uniform(0.1, 10.0, size=(1000, 1)).astype(np.float32)
    signs = g.choice(np.float32([-1e4, 1e4]), size=(16, 300))
    lows = g.uniform(-30.0, 0.0, size=(8, 1))
    rising = lows + np.linspace(0.0, 1.0, 4999) * g.uniform(1.0, 30.0, size=(8, 1))
    return [
        _softmax_case("the example", SOFTMAX_EXAMPLE),
        _softmax_case("no row", np.zeros((0, 7), dtype=np.float32)),
        _softmax_case("one element", normal(1, 1)),
        _softmax_case("one column", normal(300, 1)),
        _softmax_case("a block and one column", normal(64, 257, 3.0)),
        _softmax_case("1001 columns (not a multiple of 4)", normal(9, 1001, 2.0)),
        _softmax_case("rows near +1e4 and -1e4", np.concatenate([1e4 + normal(8, 513), -1e4 + normal(8, 513)])),
        _softmax_case("rows of exactly +-1e4", signs),
        _softmax_case("equal values", np.full((4, 1000), 7.5, dtype=np.float32)),
        _softmax_case("increasing rows", rising.astype(np.float32)),
        _softmax_case("random size", normal(int(g.integers(1, 300)), int(g.integers(1, 3000)), 4.0)),
        _softmax_case("1000 rows of different scales", normal(1000, 3000) * scales),
        _softmax_case("a vocabulary-wide row", normal(4, 50257, 2.0)),
    ]


def softmax_timed(g) -> TimedCase:
    rows, cols = SOFTMAX_TIMED_SHAPE
    x = g.standard_normal(SOFTMAX_TIMED_SHAPE).astype(np.float32)
    return TimedCase(f"x {rows} x {cols}", (x,), softmax_rows, 8 * rows * cols, SOFTMAX_FLOOR, SOFTMAX_SLOW_HINT)


@speed_point
def check_softmax_rows_cuda(fn) -> None:
    """``fn(x)`` -> the softmax of each row of x (rows, cols), float32, on the GPU: 13 cases within 1e-4 relative
    of the float64 softmax; then timed against the course's softmax_rows (floor 60%)."""
    g = rng()
    check_kernel("softmax_rows_cuda", fn, lambda: softmax_cases(g), arrays_close(SOFTMAX_RTOL, SOFTMAX_ATOL),
                 lambda: softmax_timed(g))


def race_softmax_rows_cuda(fn) -> KernelRace:
    """The learner's ``softmax_rows_cuda`` timed beside the course's kernel and a copy on this GPU ("see it")."""
    loader.require_gpu("race_softmax_rows_cuda")
    return softmax_timed(rng()).race(launcher(fn))[0]


# ------------------------------------------------------------------ 10.9 · a tiled SGEMM with register blocking
EPS32 = 2.0**-23  # float32 machine epsilon
SGEMM_FLOOR = 0.5  # of the ladder's blocktile_2d step (the same mechanism); its smem step runs at about 40% of it
SGEMM_TIMED = (4096, 4096, 4096)  # M, N, K: multiples of every step's tile, so the course's kernels run
SGEMM_EXAMPLE = (np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(12, dtype=np.float32).reshape(3, 4) - 5)
SGEMM_LOOKALIKES = {
    "the ladder's smem step (32 x 32 shared tiles, one output per thread: give each thread a TM x TN tile)":
        lambda a, b: sgemm(a, b, "smem"),
    "the ladder's coalesced step (one output per thread, no shared memory: stage tiles in shared memory)":
        lambda a, b: sgemm(a, b, "coalesced"),
    "the ladder's naive step (one output per thread, threadIdx.x down a column: uncoalesced)":
        lambda a, b: sgemm(a, b, "naive"),
}


@dataclass(frozen=True)
class Product:
    """A case's expected C and how far a float32 C may land from it, element by element."""

    c: np.ndarray  # the float64 product of the float32 inputs, rounded to float32
    bound: np.ndarray  # per element: (sqrt(K) + 1) * eps32 * (|A| @ |B|)

    def __repr__(self) -> str:
        return short(self.c)


def product_bound(abs_product: np.ndarray, k: int) -> np.ndarray:
    """(sqrt(K) + 1) * eps32 * (|A| @ |B|), element by element.

    A float32 dot product of K terms, summed in any order, makes K roundings of at most eps32 / 2 of a partial
    sum, and no partial sum is larger than (|A| @ |B|)_ij: at worst K * eps32 / 2 * (|A| @ |B|)_ij; with rounding
    errors of random sign, about sqrt(K) times one of them (Higham and Mary, 2019). Twice that probabilistic
    size, plus one eps32 for rounding the float64 answer to float32, leaves room for any summation order, FMA or
    not, while a dropped or doubled term of size |a_ik b_kj| stands out."""
    return (np.sqrt(k) + 1.0) * EPS32 * abs_product


def same_product(got, expected: Product) -> bool:
    """A float array of C's shape, finite, with ``|got - c| <= bound`` everywhere."""
    if not isinstance(got, np.ndarray) or got.shape != expected.c.shape or got.dtype.kind != "f":
        return False
    error = np.abs(got.astype(np.float64) - expected.c)
    return bool(np.all(error <= expected.bound))  # NaN compares False: a skipped element fails


def _sgemm_case(label: str, a: np.ndarray, b: np.ndarray) -> Case:
    bound = product_bound(np.abs(a).astype(np.float64) @ np.abs(b), a.shape[1])
    c = sgemm_reference(a, b) if a.size else np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)  # K = 0: zeros
    return Case(f"{label}: M, N, K = {a.shape[0]}, {b.shape[1]}, {a.shape[1]}", (a, b), expected=Product(c, bound),
                check_result=float32_result)


def sgemm_cases(g) -> list[Case]:
    """The example; M, N or K of 1; K = 0 (C is zeros); sizes off the 128 x 128 x 8 tile on every axis; one tile
    exactly; rectangular and random shapes; a 1000 x 777 x 513."""

    def pair(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        return (g.standard_normal((m, k)).astype(np.float32), g.standard_normal((k, n)).astype(np.float32))

    shapes = [("one element", 1, 1, 1), ("M = 1", 1, 300, 70), ("N = 1", 300, 1, 70), ("K = 1", 129, 65, 1),
              ("odd sizes under a tile", 65, 33, 17), ("a tile less and more one", 127, 129, 31),
              ("one tile", 128, 128, 8), ("K not a multiple of 8", 256, 256, 1001), ("wide", 130, 600, 40),
              ("tall", 700, 50, 24),
              ("random", int(g.integers(1, 400)), int(g.integers(1, 400)), int(g.integers(1, 400))),
              ("large", 1000, 777, 513)]
    zero_k = (np.zeros((70, 0), dtype=np.float32), np.zeros((0, 90), dtype=np.float32))
    return ([_sgemm_case("the example", *SGEMM_EXAMPLE), _sgemm_case("K = 0, C is zeros", *zero_k)]
            + [_sgemm_case(label, *pair(m, n, k)) for label, m, n, k in shapes])


def sgemm_timed(g) -> TimedCase:
    m, n, k = SGEMM_TIMED
    a, b = g.standard_normal((m, k)).astype(np.float32), g.standard_normal((k, n)).astype(np.float32)

    def expected_of(course_result) -> Product:  # within twice the bound of the course's C (both are float32)
        xp = backend.xp
        abs_product = backend.asnumpy(xp.abs(xp.asarray(a)) @ xp.abs(xp.asarray(b))).astype(np.float64)
        return Product(np.asarray(course_result, dtype=np.float64), 2 * product_bound(abs_product, k))

    return TimedCase(f"M = N = K = {m}", (a, b), lambda a, b: sgemm(a, b, "blocktile_2d"), 4 * (m * k + k * n + m * n),
                     SGEMM_FLOOR, expected_of=expected_of, lookalikes=SGEMM_LOOKALIKES, n_flops=2 * m * n * k,
                     anchor=lambda a, b: a @ b, anchor_label="cuBLAS")


@speed_point
def check_sgemm_tiled_cuda(fn) -> None:
    """``fn(a, b)`` -> a @ b (M, N), float32, on the GPU, for any M, N, K: 14 cases, each element within
    (sqrt(K) + 1) * eps32 * (|A| @ |B|) of the float64 product; then timed against the ladder's blocktile_2d
    (floor 50%)."""
    g = rng()
    check_kernel("sgemm_tiled_cuda", fn, lambda: sgemm_cases(g), same_product, lambda: sgemm_timed(g))


def race_sgemm_tiled_cuda(fn) -> KernelRace:
    """The learner's ``sgemm_tiled_cuda`` timed beside the ladder's blocktile_2d and cuBLAS on this GPU ("see it")."""
    loader.require_gpu("race_sgemm_tiled_cuda")
    return sgemm_timed(rng()).race(launcher(fn))[0]
