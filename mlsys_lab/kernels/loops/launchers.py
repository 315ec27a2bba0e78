"""Launchers for ``loops/matmul.cu`` and ``loops/stencil.cu``: loop transformations run on a GPU.

Every launcher has a NumPy reference beside it (``*_reference``); the checks compare them by relative
Frobenius error :func:`mlsys_lab.validation.relative_error`. On a machine without a GPU the launchers raise
``loader.GPUUnavailable`` and the lesson shows figures recorded on a GPU (``mlsys_lab/data/loops_gpu.json``).

Shapes: a (M, K), b (K, N), c (M, N); stencil grids (rows, cols); all float32, C-contiguous.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_sequence

MATMUL_SOURCE = "loops/matmul.cu"
STENCIL_SOURCE = "loops/stencil.cu"
NAIVE_VARIANTS = ("rows_inner", "cols_inner", "tiled")
SHARED_LIMIT_BYTES = 48 * 1024  # static shared memory per block without opting in


@dataclass(frozen=True)
class TunableConfig:
    """One point of the ``matmul_tunable`` search space (see the comment at the top of the .cu file)."""

    BM: int = 64
    BN: int = 64
    BK: int = 16
    TM: int = 4
    TN: int = 4
    UNROLL: int = 4
    VEC: int = 4
    PIPE: int = 1

    def __post_init__(self) -> None:
        for name in ("BM", "BN", "BK", "TM", "TN", "UNROLL", "VEC"):
            check_int(name, getattr(self, name), low=1, high=4096)
        check_int("PIPE", self.PIPE, low=0, high=1)

    @property
    def threads(self) -> int:
        """Threads per block: one per TM x TN patch of the BM x BN tile."""
        return (self.BM // self.TM) * (self.BN // self.TN)

    @property
    def shared_bytes(self) -> int:
        """Static shared memory: (1 + PIPE) buffers of BK x (BM + BN) floats."""
        return (1 + self.PIPE) * self.BK * (self.BM + self.BN) * 4

    @property
    def defines(self) -> dict[str, int]:
        return asdict(self)

    def problem(self) -> str | None:
        """Why this configuration cannot compile or launch, or None when it can."""
        if self.BM % self.TM or self.BN % self.TN:
            return f"TM={self.TM} must divide BM={self.BM} and TN={self.TN} must divide BN={self.BN}"
        if not 32 <= self.threads <= 1024:
            return f"threads per block (BM/TM)*(BN/TN) = {self.threads} must be between 32 and 1024"
        if self.shared_bytes > SHARED_LIMIT_BYTES:
            return f"shared memory {self.shared_bytes} B exceeds {SHARED_LIMIT_BYTES} B"
        if self.BK % self.VEC or self.BN % self.VEC:
            return f"VEC={self.VEC} must divide BK={self.BK} and BN={self.BN}"
        if self.UNROLL > self.BK:
            return f"UNROLL={self.UNROLL} must be <= BK={self.BK}"
        return None


def tunable_space(BM=(32, 64, 128), BN=(32, 64, 128), BK=(8, 16, 32), TM=(2, 4, 8), TN=(2, 4, 8),
                  UNROLL=(1, 8), VEC=(1, 4), PIPE=(0, 1)) -> list[TunableConfig]:  # noqa: N803
    """Every valid configuration of the product of the given values (invalid ones dropped)."""
    for name, values in (("BM", BM), ("BN", BN), ("BK", BK), ("TM", TM), ("TN", TN), ("UNROLL", UNROLL),
                         ("VEC", VEC), ("PIPE", PIPE)):
        check_sequence(name, values, max_size=64)  # each value is checked by TunableConfig
    configs = (TunableConfig(*values) for values in itertools.product(BM, BN, BK, TM, TN, UNROLL, VEC, PIPE))
    return [c for c in configs if c.problem() is None]


def matmul_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A @ B in float64 (the answer every kernel is checked against)."""
    _shapes(check_array("a", a, ndim=2), check_array("b", b, ndim=2))
    return np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)


def _shapes(a, b) -> tuple[int, int, int]:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a and b must be 2-D with a.shape[1] == b.shape[0]; got {a.shape} and {b.shape}")
    return a.shape[0], b.shape[1], a.shape[1]


def matmul_naive(a, b, variant: str = "rows_inner", tile: int = 32):
    """C = A @ B by a naive kernel: ``rows_inner`` (coalesced), ``cols_inner`` (interchanged), ``tiled``."""
    check_choice("variant", variant, NAIVE_VARIANTS)
    loader.require_gpu(f"matmul_naive({variant!r})")
    xp = backend.xp
    m, n, k = _shapes(a, b)
    c = xp.empty((m, n), dtype=xp.float32)
    args = (a, b, c, np.int32(m), np.int32(n), np.int32(k))
    if variant == "tiled":
        tile = check_int("tile", tile, low=8, high=32)
        fn = loader.kernel(MATMUL_SOURCE, "matmul_tiled", {"TILE": tile})
        fn((loader.blocks_for(n, tile), loader.blocks_for(m, tile)), (tile, tile), args)
    elif variant == "rows_inner":
        fn = loader.kernel(MATMUL_SOURCE, "matmul_rows_inner")
        fn((loader.blocks_for(n, 32), loader.blocks_for(m, 8)), (32, 8), args)
    else:
        fn = loader.kernel(MATMUL_SOURCE, "matmul_cols_inner")
        fn((loader.blocks_for(m, 32), loader.blocks_for(n, 8)), (32, 8), args)
    return c


def matmul_tunable(a, b, config: TunableConfig = TunableConfig()):
    """C = A @ B with ``matmul_tunable`` compiled for ``config``; M, N, K must be multiples of the tile."""
    problem = config.problem()
    if problem:
        raise ValueError(f"config is not valid: {problem}")
    loader.require_gpu("matmul_tunable")
    xp = backend.xp
    m, n, k = _shapes(a, b)
    for name, size, tile in (("M", m, config.BM), ("N", n, config.BN), ("K", k, config.BK)):
        if size % tile:
            raise ValueError(f"{name}={size} must be a multiple of the tile size {tile}")
    c = xp.empty((m, n), dtype=xp.float32)
    fn = loader.kernel(MATMUL_SOURCE, "matmul_tunable", config.defines)
    fn((n // config.BN, m // config.BM), (config.threads,), (a, b, c, np.int32(m), np.int32(n), np.int32(k)))
    return c


def tunable_function(config: TunableConfig):
    """The compiled ``cupy.RawKernel`` for ``config`` (to read ``num_regs``, ``local_size_bytes``)."""
    return loader.kernel(MATMUL_SOURCE, "matmul_tunable", config.defines)


def jacobi5_reference(u: np.ndarray) -> np.ndarray:
    """One 5-point Jacobi step on the interior; the border is copied from ``u``."""
    check_array("u", u, ndim=2, finite=True)
    u = np.asarray(u, dtype=np.float64)
    out = u.copy()
    out[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return out


def jacobi5(u, columns_inner: bool = True):
    """One Jacobi step on the GPU; ``columns_inner=False`` uses the interchanged (strided) mapping."""
    loader.require_gpu("jacobi5")
    rows, cols = u.shape
    out = u.copy()
    name = "jacobi5" if columns_inner else "jacobi5_cols"
    fast, slow = (cols, rows) if columns_inner else (rows, cols)
    loader.kernel(STENCIL_SOURCE, name)((loader.blocks_for(fast, 32), loader.blocks_for(slow, 8)), (32, 8),
                                        (u, out, np.int32(rows), np.int32(cols)))
    return out


def affine_relu_reference(x: np.ndarray, scale: float, shift: float) -> np.ndarray:
    """max(scale * x + shift, 0)."""
    check_array("x", x, ndim=(1, 2, 3), finite=True)
    check_finite("scale", scale)
    check_finite("shift", shift)
    return np.maximum(scale * np.asarray(x, dtype=np.float64) + shift, 0.0)


def affine_relu(x, scale: float, shift: float, fused: bool = True, blocks: int = 1024, threads: int = 256):
    """relu(scale * x + shift): one fused kernel, or two kernels with y written to memory in between."""
    loader.require_gpu("affine_relu")
    xp = backend.xp
    n = np.int64(x.size)
    out = xp.empty_like(x)
    s, t = np.float32(scale), np.float32(shift)
    if fused:
        loader.kernel(STENCIL_SOURCE, "affine_relu")((blocks,), (threads,), (x, out, s, t, n))
    else:
        y = xp.empty_like(x)
        loader.kernel(STENCIL_SOURCE, "affine")((blocks,), (threads,), (x, y, s, t, n))
        loader.kernel(STENCIL_SOURCE, "relu")((blocks,), (threads,), (y, out, n))
    return out
