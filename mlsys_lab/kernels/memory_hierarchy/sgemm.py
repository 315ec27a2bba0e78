"""Launchers for the SGEMM progression in ``memory_hierarchy/sgemm.cu``: C = A @ B in FP32, row-major.

Each :class:`SgemmStep` names one kernel of the progression (naive -> ... -> warp tiling with double
buffering), its template parameters, and the launch shape. :func:`sgemm` runs one step on the GPU;
:func:`sgemm_reference` is the NumPy answer every step is checked against (relative Frobenius
error, :func:`mlsys_lab.validation.relative_error`). The steps follow Simon Boehm's worklog "How to Optimize a CUDA
Matmul Kernel for cuBLAS-like Performance" (2022) and CUTLASS's hierarchical tiling.

Shapes: A (M, K), B (K, N), C (M, N), float32, C-contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_choice,
    check_int,
    check_sequence,
    check_str,
    check_type,
)

SOURCE = "memory_hierarchy/sgemm.cu"
WARPTILE_PARAMS = ("BM", "BN", "BK", "WM", "WN", "WNITER", "TM", "TN", "THREADS", "GROUP")


@dataclass(frozen=True)
class SgemmStep:
    """One kernel of the progression: its name in the .cu file, template parameters and what it adds."""

    name: str
    function: str  # kernel name in memory_hierarchy/sgemm.cu
    idea: str
    params: dict[str, int] = field(default_factory=dict)  # template parameters, in declaration order

    def __post_init__(self) -> None:
        for name in ("name", "function", "idea"):
            check_str(name, getattr(self, name))
        check_type("params", self.params, dict)

    @property
    def expression(self) -> str:
        """The name CuPy compiles: ``sgemm_2d<128, 128, 8, 8, 8>`` or a plain ``extern "C"`` name."""
        if not self.params:
            return self.function
        return f"{self.function}<{', '.join(str(v) for v in self.params.values())}>"

    @property
    def tile(self) -> tuple[int, int, int]:
        """(BM, BN, BK): the block tile; M, N, K must be multiples of it (32 x 32 steps check bounds)."""
        p = self.params
        return (p["BM"], p["BN"], p["BK"]) if p else (1, 1, 1)

    @property
    def threads(self) -> int:
        p = self.params
        if not p:
            return 32 * 32
        if "THREADS" in p:
            return p["THREADS"]
        return p["BM"] * p["BN"] // (p["TM"] * p.get("TN", 1))

    def launch_shape(self, m: int, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(grid, block) for an (m, n) output."""
        if self.function == "sgemm_naive":  # blockIdx.x walks rows: the deliberately bad mapping
            return (loader.blocks_for(m, 32), loader.blocks_for(n, 32)), (32, 32)
        if not self.params:
            return (loader.blocks_for(n, 32), loader.blocks_for(m, 32)), (32, 32)
        bm, bn, _ = self.tile
        return (n // bn, m // bm), (self.threads,)


def warptile_step(name: str, function: str, idea: str, values: tuple[int, ...]) -> SgemmStep:
    """A warp-tiling step from its template values (BM, BN, BK, WM, WN, WNITER, TM, TN, THREADS, GROUP)."""
    for v in check_sequence("values", values, min_size=len(WARPTILE_PARAMS), max_size=len(WARPTILE_PARAMS)):
        check_int("values", v, low=1)
    return SgemmStep(name, function, idea, dict(zip(WARPTILE_PARAMS, values, strict=True)))


STEPS: dict[str, SgemmStep] = {s.name: s for s in (
    SgemmStep("naive", "sgemm_naive", "one thread per output; threadIdx.x walks down a column (strided)"),
    SgemmStep("coalesced", "sgemm_coalesced", "threadIdx.x walks along a row: B and C accesses coalesce"),
    SgemmStep("smem", "sgemm_smem", "32 x 32 tiles of A and B staged in shared memory"),
    SgemmStep("blocktile_1d", "sgemm_blocktile_1d", "each thread computes 8 outputs of a column",
              {"BM": 64, "BN": 64, "BK": 8, "TM": 8}),
    SgemmStep("blocktile_2d", "sgemm_blocktile_2d", "each thread computes an 8 x 8 tile (outer product)",
              {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}),
    SgemmStep("vectorized", "sgemm_vectorized", "float4 loads; A transposed in shared memory",
              {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}),
    SgemmStep("double_buffer", "sgemm_double_buffer", "next tile fetched into registers during the FMAs",
              {"BM": 128, "BN": 128, "BK": 8, "TM": 8, "TN": 8}),
    warptile_step("warptile", "sgemm_warptile", "warp-level tile between block and thread tiles",
                  (128, 128, 16, 64, 64, 4, 8, 4, 128, 1)),
    warptile_step("warptile_db", "sgemm_warptile_db", "warp tiling with double buffering",
                  (128, 128, 16, 64, 64, 4, 8, 4, 128, 1)),
    warptile_step("grouped", "sgemm_warptile_db", "tuned tile shape; blocks in L2-friendly groups of rows",
                  (128, 128, 8, 64, 64, 2, 8, 8, 128, 8)),
)}

# Configurations of the last two steps tried by the autotuning pass of benchmarks/memory_gpu.py.
WARPTILE_CANDIDATES: tuple[tuple[int, ...], ...] = (
    (128, 128, 16, 64, 64, 4, 8, 4, 128, 1),
    (128, 128, 8, 64, 64, 2, 8, 8, 128, 1),
    (128, 128, 8, 64, 64, 2, 8, 8, 128, 4),
    (128, 128, 8, 64, 64, 2, 8, 8, 128, 8),
    (128, 128, 8, 64, 64, 2, 8, 8, 128, 16),
    (128, 128, 8, 64, 64, 1, 8, 8, 128, 8),
    (128, 128, 8, 32, 128, 2, 8, 8, 128, 8),
    (128, 128, 8, 128, 32, 1, 8, 8, 128, 8),
    (128, 128, 16, 64, 64, 2, 8, 8, 128, 8),
    (128, 128, 16, 64, 32, 1, 8, 4, 256, 8),
    (64, 128, 16, 32, 64, 2, 8, 4, 128, 8),
    (256, 128, 16, 128, 64, 4, 8, 4, 128, 1),  # 128 accumulators per thread: spills (kept as the warning)
)


def check_shapes(step: SgemmStep, m: int, n: int, k: int) -> None:
    """ValueError unless (m, n, k) are positive multiples of the step's block tile."""
    check_type("step", step, SgemmStep)
    for label, size, multiple in (("M", m, step.tile[0]), ("N", n, step.tile[1]), ("K", k, step.tile[2])):
        check_int(label.lower(), size, low=1)
        if size % multiple:
            raise ValueError(f"{label} must be a multiple of {multiple} for step {step.name!r} "
                             f"(block tile {step.tile}); got {size} (argument {label.lower()})")


def sgemm_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy reference: the float64 product of the float32 inputs, rounded to float32."""
    check_array("a", a, ndim=2, finite=True)
    if check_array("b", b, ndim=2, finite=True).shape[0] != a.shape[1]:
        raise ValueError(f"b must have a.shape[1] = {a.shape[1]} rows; got shape {b.shape}")
    return (np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64)).astype(np.float32)


def sgemm(a, b, step: str | SgemmStep = "warptile_db", out=None):
    """C = A @ B with one kernel of the progression, on the GPU (``GPUUnavailable`` on a CPU).

    ``a`` (M, K) and ``b`` (K, N) are float32 device arrays; ``out`` (M, N) is reused when given.
    """
    if isinstance(step, str):
        step = STEPS[check_choice("step", step, STEPS)]
    loader.require_gpu(f"SGEMM step {step.name!r}")
    xp = backend.xp
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a must be (M, K) and b (K, N); got a {a.shape} and b {b.shape}")
    m, k = a.shape
    n = b.shape[1]
    check_shapes(step, m, n, k)
    a = xp.ascontiguousarray(a, dtype=xp.float32)
    b = xp.ascontiguousarray(b, dtype=xp.float32)
    out = xp.empty((m, n), dtype=xp.float32) if out is None else out
    grid, block = step.launch_shape(m, n)
    fn = loader.kernel(SOURCE, step.expression)
    fn(grid, block, (np.int32(m), np.int32(n), np.int32(k), a, b, out))
    return out


def warptile_problems(values: tuple[int, ...], double_buffer: bool = False) -> list[str]:
    """Why a warp-tiling configuration cannot work (empty list: it can). Mirrors the kernel's asserts."""
    for v in check_sequence("values", values, min_size=len(WARPTILE_PARAMS), max_size=len(WARPTILE_PARAMS)):
        check_int("values", v, low=1)
    check_bool("double_buffer", double_buffer)
    bm, bn, bk, wm, wn, wniter, tm, tn, threads, group = values
    problems = []
    if (bm // wm) * (bn // wn) * 32 != threads or bm % wm or bn % wn:
        problems.append(f"{threads} threads must be one warp per {wm} x {wn} tile of a {bm} x {bn} block")
    wmiter = max((wm * wn) // (32 * tm * tn * wniter), 1)
    if wmiter * (wm // wmiter) != wm or (wn // wniter // tn) * (wm // wmiter // tm) != 32:
        problems.append("the 32 threads of a warp must cover one warp sub-tile exactly")
    if (bm * bk) % (4 * threads) or (bk * bn) % (4 * threads) or (4 * threads) % bk or (4 * threads) % bn:
        problems.append("the float4 tile loads must divide evenly among the threads")
    if tm % 4 or tn % 4:
        problems.append("TM and TN must be multiples of 4 (float4 shared loads)")
    if group < 1:
        problems.append(f"GROUP must be >= 1; got {group}")
    smem_bytes = 4 * bk * (bm + bn) * (2 if double_buffer else 1)
    if smem_bytes > 48 * 1024:
        problems.append(f"static shared memory {smem_bytes} bytes > 48 KiB")
    return problems
