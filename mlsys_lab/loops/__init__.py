"""Lesson 02, loop transformations: real CPU kernels (numba), their legality, and a small cache model.

* :mod:`.dependence`: distance vectors; legality of interchange, tiling, skewing, fusion, unroll-and-jam.
* :mod:`.cache_model`: cache misses of a matmul loop nest, by the textbook formula and by simulation
  (:func:`miss_curves`: every loop order over the explorer's tiles; :func:`matmul_trace`: the address trace).
* :mod:`.single`: unrolling, vectorization, peeling, parallelization, fusion on one loop.
* :mod:`.matmul`: interchange, tiling, unroll-and-jam and a register-blocked micro-kernel on matmul.
* :mod:`.wavefront`: skewing a dynamic-programming recurrence into parallel wavefronts.
* :mod:`.measure`: before/after timing of a transformation, the blocked matmul measured beside the cache
  model, and the FLOP/s of the recorded CPU and GPU matmul ladders.

The GPU versions of these loops are in :mod:`mlsys_lab.kernels.loops.launchers`.

Importing this package compiles nothing; each kernel compiles (or loads from numba's cache) on its
first call.
"""

from mlsys_lab.loops.cache_model import (
    LOOP_ORDERS,
    TILES,
    inner_stride,
    matmul_trace,
    miss_curves,
    misses_per_iteration,
    simulate_matmul_misses,
    tile_fits,
)
from mlsys_lab.loops.dependence import (
    apply_transformation,
    fusion_legal,
    interchange_legal,
    is_legal,
    legal_orders,
    lexicographically_positive,
    parallel_loops,
    permute,
    skew,
    tiling_legal,
    unroll_and_jam_legal,
)
from mlsys_lab.loops.measure import (
    best_microkernel_seconds,
    blocked_sweep,
    compare,
    cpu_ladder_rates,
    gpu_ladder_rates,
    measure_blocked,
)

__all__ = [
    "LOOP_ORDERS", "TILES", "inner_stride", "matmul_trace", "miss_curves", "misses_per_iteration",
    "simulate_matmul_misses", "tile_fits",
    "apply_transformation", "fusion_legal", "interchange_legal", "is_legal", "legal_orders",
    "lexicographically_positive",
    "parallel_loops", "permute", "skew", "tiling_legal", "unroll_and_jam_legal",
    "compare", "measure_blocked", "blocked_sweep", "best_microkernel_seconds", "cpu_ladder_rates", "gpu_ladder_rates",
]
