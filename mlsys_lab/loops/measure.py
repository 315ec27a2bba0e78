"""Measure the transformations: before/after timings on this machine, and the recorded benchmark runs.

* :func:`compare`: the same work before and after a transformation, checked equal, timed, as a speed-up;
* :func:`measure_blocked` and :func:`blocked_sweep`: the blocked matmul over loop orders and tiles, beside
  the cache model's simulated misses (what the loop-order explorer and the model check use);
* :func:`cpu_ladder_rates`, :func:`gpu_ladder_rates`: FLOP/s of each step of the recorded matmul ladders
  (``benchmarks/loops_cpu.py`` and ``benchmarks/loops_gpu.py``; load them with ``records.load``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.loops.cache_model import TILES, miss_curves
from mlsys_lab.loops.matmul import matmul_blocked
from mlsys_lab.operators.cost import matmul_cost
from mlsys_lab.timing import benchmark
from mlsys_lab.units import format_seconds


@dataclass(frozen=True)
class Comparison:
    """Median seconds before and after a transformation, and the speed-up before / after."""

    name: str
    before_s: float
    after_s: float

    @property
    def speedup(self) -> float:
        return self.before_s / self.after_s

    def __str__(self) -> str:
        before, after = format_seconds(self.before_s), format_seconds(self.after_s)
        return f"{self.name:28s} before {before:>9s}   after {after:>9s}   speed-up {self.speedup:5.2f}x"


def compare(name: str, before: Callable[[], object], after: Callable[[], object], repeat: int = 5,
            check: bool = True) -> Comparison:
    """Run both once (compiling them), check they agree, then time each (median of ``repeat``)."""
    if check:
        first, second = before(), after()
        if not np.allclose(np.asarray(first), np.asarray(second), rtol=1e-9, atol=1e-9):
            raise ValueError(f"{name}: before and after disagree; the transformation changed the result")
    return Comparison(name, benchmark(before, warmup=1, repeat=repeat).median,
                      benchmark(after, warmup=1, repeat=repeat).median)


def measure_blocked(n: int, order: str, tile: int, repeat: int = 3) -> float:
    """Median seconds of :func:`~mlsys_lab.loops.matmul.matmul_blocked` on random n x n float64 matrices."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    out = np.empty((n, n))
    return benchmark(lambda: matmul_blocked(a, b, out, order, tile), warmup=1, repeat=repeat).median


def blocked_sweep(n: int, repeat: int = 3) -> dict[str, np.ndarray]:
    """Every (loop order, tile) of ``TILES`` for an n x n blocked matmul: simulated L1 misses per iteration
    (:func:`~mlsys_lab.loops.cache_model.miss_curves`) and the median seconds measured here.

    Returns arrays of equal length: ``order``, ``tile`` (tiles above n run untiled), ``misses``, ``seconds``.
    """
    curves = miss_curves(n)
    points = [(order, tile) for order in curves for tile in TILES]
    return {
        "order": np.array([order for order, _ in points]),
        "tile": np.array([min(tile, n) for _, tile in points]),
        "misses": np.array([curves[order][TILES.index(tile)] for order, tile in points]),
        "seconds": np.array([measure_blocked(n, order, min(tile, n), repeat) for order, tile in points]),
    }


# -------------------------------------------------------------------------------- recorded runs
def best_microkernel_seconds(seconds: dict[str, float]) -> float:
    """The faster of the two SLP-vectorized micro-kernels (8 x 16 and 4 x 8) in a ``loops_cpu`` table."""
    return min(seconds["microkernel_8x16"], seconds["microkernel_4x8"])


def cpu_ladder_rates(run: dict, stat: str = "seconds") -> dict[str, float]:
    """FLOP/s of each step of the recorded CPU matmul ladder (float64, 2 n³ FLOP), from the ``stat`` table
    ("seconds": medians, "min_seconds": fastest runs). The loop-order steps ran at n = 512, the others at the
    run's ``matmul_n``."""
    s, n = run[stat], run["matmul_n"]
    small, large = matmul_cost(512, 512, 512, "fp64").flop, matmul_cost(n, n, n, "fp64").flop
    return {
        "ijk (n=512)": small / s["ijk_512"],
        "ijk unroll-\nand-jam (512)": small / s["ijk_unroll_jam_512"],
        "ikj (n=512)": small / s["ikj_512"],
        "ikj": large / s["ikj"],
        "ikj tiled": large / s["tiled_64_256_256"],
        "micro-kernel,\nfastmath=True": large / s["microkernel_8x16_fastmath"],
        "micro-kernel,\nSLP vectorized": large / best_microkernel_seconds(s),
        "NumPy BLAS": large / s["blas_matmul"],
    }


# The GPU ladder of lesson 02: label -> kernel name in ``loops_gpu``.
GPU_LADDER = {
    "naive, rows\ninner (strided)": "matmul_cols_inner",
    "naive, cols\ninner": "matmul_rows_inner",
    "shared tile 32": "matmul_tiled_32",
    "4x4 per thread": "tunable_tm4_tn4_vec1_pipe0",
    "+ float4": "tunable_tm4_tn4_vec4_pipe0",
    "+ double buffer": "tunable_tm4_tn4_vec4_pipe1",
    "128x128, 8x8": "tunable_128x128_tm8_tn8",
    "cuBLAS": "cublas_matmul",
}


def gpu_ladder_rates(run: dict) -> dict[str, float]:
    """FLOP/s (float32) of each step of the recorded GPU matmul ladder, labelled as in ``GPU_LADDER``."""
    rows = {r["name"]: r for r in run["kernels"]}
    return {label: rows[name]["flop_per_s"] for label, name in GPU_LADDER.items()}
