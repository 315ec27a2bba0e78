"""A warp-level GPU simulator: kernels written in Python, every memory request of a warp counted.

A kernel here is a Python function the simulator calls once per thread block. Inside, the block's warps
run one after another in program order, and a warp's load or store is *one* indexing of a simulated
array with the indices of its lanes, a NumPy array of at most 32 integers (the SIMT model of
:mod:`.simt`: ``lane = np.arange(32)``, then ``A[row * n_cols + lane]``)::

    def copy_block(bx, by, A, B, tile, n_rows, n_cols):
        lane = np.arange(32)
        for r in range(32):                        # 32 requests of one warp each
            i = (by * 32 + r) * n_cols + bx * 32 + lane
            B[i] = A[i]                            # 4 sectors read, 4 written

The arrays record what each request costs, computed here from the addresses, never reported by the kernel:

* :class:`GlobalArray` (float32 in HBM): the 32-byte sectors each request touches
  (:func:`.simt.sectors_per_request`);
* :class:`SharedArray` (float32 words, one per block): the passes each request takes
  (:func:`.simt.bank_conflict_degree`). It starts filled with NaN, so a warp that reads a word no warp has
  written yet (a missing ``__syncthreads()``) gets NaN into its result.

A request of fewer than 32 lanes (the active lanes of a warp, ``if tid < s``) costs what those lanes
touch. Splitting a request never makes it cheaper: the counts add up over requests. The simulator is
the course's model, not a GPU: it runs the warps of a block in order, so it sees a missing barrier only
when a read comes before the write it needs, as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from mlsys_lab.memory_hierarchy.simt import WARP_SIZE, bank_conflict_degree, sectors_per_request
from mlsys_lab.validation import check_array, check_int, check_sequence, check_type

ELEMENT_BYTES = 4  # float32


def _warp_of(lanes: np.ndarray) -> np.ndarray:
    """Pad a request of k <= 32 lanes to 32 by repeating lane 0 (a repeated address costs nothing more)."""
    if lanes.size == WARP_SIZE:
        return lanes
    return np.concatenate([lanes, np.full(WARP_SIZE - lanes.size, lanes[0])])


class _RecordingArray:
    """A flat float32 array whose every indexing is one warp request, recorded."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"__getitem__", "__setitem__", "__len__", "name"})

    kind = "array"

    def __init__(self, values, name: str) -> None:
        # private: a learner's kernel, graded, reaches these arrays only by indexing them (the recorded path)
        self._values = np.array(values, dtype=np.float32).ravel()
        self._name = name
        self._loads: list[np.ndarray] = []  # element indices of each load request
        self._stores: list[np.ndarray] = []
        self._block_requests: list[int] = [0, 0]  # [requests in this block, the most allowed]; set by launch

    def __len__(self) -> int:
        return self._values.size

    def _lanes(self, index: Any) -> np.ndarray:
        lanes = np.atleast_1d(np.asarray(index))
        if lanes.ndim != 1 or lanes.size == 0 or lanes.size > WARP_SIZE or lanes.dtype.kind not in "iu":
            raise TypeError(f"{self._name}[index]: index must be an int or 1 to 32 ints, one per lane of a warp "
                            f"(got {lanes.dtype} of shape {lanes.shape})")
        count = self._block_requests
        count[0] += 1
        if count[1] and count[0] > count[1]:
            raise RuntimeError(f"more than {count[1]} memory requests in one block: each indexing is one warp's "
                               "request, serving up to 32 lanes at once")
        if lanes.min() < 0 or lanes.max() >= self._values.size:
            raise IndexError(f"{self._name}[index]: index out of range 0..{self._values.size - 1} "
                             f"(got {int(lanes.min())}..{int(lanes.max())})")
        return lanes.astype(np.int64)

    def __getitem__(self, index: Any):
        lanes = self._lanes(index)
        self._loads.append(lanes)
        got = self._values[lanes].copy()
        return got if np.ndim(index) else float(got[0])

    def __setitem__(self, index: Any, value: Any) -> None:
        lanes = self._lanes(index)
        try:
            data = np.asarray(value, dtype=np.float32)
            if data.shape != lanes.shape:
                data = np.broadcast_to(data, lanes.shape)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self._name}[index] = value: value must be one number or one per lane "
                             f"({lanes.size}); got {np.shape(value)}") from exc
        self._stores.append(lanes)
        self._values[lanes] = data


class GlobalArray(_RecordingArray):
    """float32 array in global memory: each request costs the 32-byte sectors its lanes touch."""

    kind = "global"

    def _sectors(self, requests: list[np.ndarray]) -> int:
        if not requests:
            return 0
        return int(sectors_per_request(np.stack([_warp_of(r) for r in requests]) * ELEMENT_BYTES).sum())

    @property
    def load_sectors(self) -> int:
        return self._sectors(self._loads)

    @property
    def store_sectors(self) -> int:
        return self._sectors(self._stores)


class SharedArray(_RecordingArray):
    """float32 words of one block's shared memory (start as NaN): each request costs its bank passes."""

    kind = "shared"

    def __init__(self, n_words: int, name: str = "shared") -> None:
        super().__init__(np.full(check_int("n_words", n_words, low=1, high=12288), np.nan), name)

    @property
    def passes(self) -> int:
        requests = self._loads + self._stores
        return int(bank_conflict_degree(np.stack([_warp_of(r) for r in requests])).sum()) if requests else 0


@dataclass
class Counts:
    """What a launch cost, added over its blocks and arrays (all computed from the recorded requests)."""

    load_sectors: int = 0  # global memory
    store_sectors: int = 0
    shared_requests: int = 0
    shared_passes: int = 0
    shared_words_stored: int = 0  # lanes that stored a shared word (one per lane per request)
    shared_words_loaded: int = 0
    per_array: dict[str, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for f in ("load_sectors", "store_sectors", "shared_requests", "shared_passes", "shared_words_stored",
                  "shared_words_loaded"):
            check_int(f, getattr(self, f), low=0)
        check_type("per_array", self.per_array, dict)

    def add_shared(self, shared: SharedArray) -> None:
        self.shared_requests += len(shared._loads) + len(shared._stores)
        self.shared_passes += shared.passes
        self.shared_words_stored += sum(r.size for r in shared._stores)
        self.shared_words_loaded += sum(r.size for r in shared._loads)

    def add_global(self, array: GlobalArray) -> None:
        loads, stores = array.load_sectors, array.store_sectors
        self.load_sectors += loads
        self.store_sectors += stores
        self.per_array[array._name] = {"load_sectors": loads, "store_sectors": stores,
                                      "requests": len(array._loads) + len(array._stores)}


def _check_kernel(kernel) -> None:
    if not callable(kernel):
        raise TypeError(f"kernel must be a callable (a block function); got {type(kernel).__name__} {kernel!r:.40}")


def launch(kernel: Callable, grid: tuple[int, ...], arrays: list[GlobalArray], shared_words: int,
           *scalars: Any, max_requests: int = 0) -> Counts:
    """Run ``kernel(block..., *arrays, shared, *scalars)`` for every block of ``grid`` (1-D ``(nx,)``: the
    block is ``bx``; 2-D ``(nx, ny)``: ``bx, by``), each block with a fresh :class:`SharedArray` of
    ``shared_words``, and return the :class:`Counts` of the whole launch. ``max_requests`` > 0 stops a
    block that issues more requests than that (a loop over threads instead of warps) with a RuntimeError."""
    _check_kernel(kernel)
    check_sequence("grid", grid)
    for array in check_sequence("arrays", arrays):
        check_type("arrays", array, GlobalArray)
    check_int("shared_words", shared_words, low=1, high=12288)
    check_int("max_requests", max_requests, low=0)
    if len(grid) not in (1, 2):
        raise ValueError(f"grid must be (nx,) or (nx, ny); got {grid!r}")
    for axis, size in zip("xy", grid, strict=False):
        check_int(f"grid {axis}", size, low=1, high=4096)
    counts = Counts()
    blocks = [(bx,) for bx in range(grid[0])] if len(grid) == 1 else \
        [(bx, by) for by in range(grid[1]) for bx in range(grid[0])]
    for block in blocks:
        shared = SharedArray(shared_words)
        count = [0, max_requests]
        for array in [*arrays, shared]:
            array._block_requests = count
        kernel(*block, *arrays, shared, *scalars)
        counts.add_shared(shared)
    for array in arrays:
        counts.add_global(array)
    return counts


# ------------------------------------------------------------------ the kernel to beat
def transpose_naive_block(bx: int, by: int, A, B, tile, n_rows: int, n_cols: int) -> None:
    """B = A.T straight from global memory (``transpose_naive`` in ``memory_hierarchy/shared.cu``).

    Lane = column of A: the reads ``A[row, bx*32 + lane]`` are coalesced (4 sectors), the writes
    ``B[bx*32 + lane, row]`` are ``n_rows`` floats apart (32 sectors each). ``tile`` is not used.
    """
    check_type("A", A, GlobalArray)
    check_type("B", B, GlobalArray)
    check_int("bx", bx, low=0, high=4095)  # launch's grid limit
    check_int("by", by, low=0, high=4095)
    check_int("n_rows", n_rows, low=1, high=4096 * WARP_SIZE)
    check_int("n_cols", n_cols, low=1, high=4096 * WARP_SIZE)
    for name, array in (("A", A), ("B", B)):
        if array._values.size != n_rows * n_cols:
            raise ValueError(f"{name} must hold n_rows x n_cols = {n_rows} x {n_cols} floats; got {array._values.size}")
    if (bx + 1) * WARP_SIZE > n_cols or (by + 1) * WARP_SIZE > n_rows:
        raise ValueError(f"bx, by must name a 32 x 32 tile inside n_rows x n_cols = {n_rows} x {n_cols}; "
                         f"got ({bx}, {by})")
    lane = np.arange(WARP_SIZE)
    for r in range(WARP_SIZE):
        row = by * WARP_SIZE + r
        col = bx * WARP_SIZE + lane
        B[col * n_rows + row] = A[row * n_cols + col]


def run_transpose(kernel: Callable, a: np.ndarray, shared_words: int = 32 * 33,
                  max_requests: int = 0) -> tuple[np.ndarray, Counts]:
    """Launch a transpose kernel over ``a`` (n_rows x n_cols, multiples of 32) with one block per 32 x 32
    tile; return ``(B as an n_cols x n_rows array, counts)``."""
    _check_kernel(kernel)
    check_array("a", a)
    check_int("shared_words", shared_words, low=1, high=12288)
    check_int("max_requests", max_requests, low=0)
    a = np.asarray(a, dtype=np.float32)
    if a.ndim != 2 or a.shape[0] % WARP_SIZE or a.shape[1] % WARP_SIZE or a.size == 0:
        raise ValueError(f"a must be a 2-D array whose sides are multiples of 32; got shape {a.shape}")
    n_rows, n_cols = a.shape
    A, B = GlobalArray(a, "A"), GlobalArray(np.full(a.size, np.nan), "B")
    counts = launch(kernel, (n_cols // WARP_SIZE, n_rows // WARP_SIZE), [A, B], shared_words, n_rows, n_cols,
                    max_requests=max_requests)
    return B._values.reshape(n_cols, n_rows), counts


def run_reduce(kernel: Callable, x: np.ndarray, block_elements: int = 256,
               max_requests: int = 0) -> tuple[np.ndarray, Counts]:
    """Launch a block-sum kernel over ``x`` (a multiple of ``block_elements`` floats), one block per
    ``block_elements`` and as many shared words; return ``(out, counts)``, ``out[b]`` the sum of block b."""
    _check_kernel(kernel)
    check_array("x", x)
    check_int("max_requests", max_requests, low=0)
    x = np.asarray(x, dtype=np.float32).ravel()
    check_int("block_elements", block_elements, low=32, high=1024)
    if x.size == 0 or x.size % block_elements:
        raise ValueError(f"x must hold a positive multiple of {block_elements} floats; got {x.size}")
    n_blocks = x.size // block_elements
    X, out = GlobalArray(x, "x"), GlobalArray(np.full(n_blocks, np.nan), "out")
    counts = launch(kernel, (n_blocks,), [X, out], block_elements, max_requests=max_requests)
    return out._values.copy(), counts
