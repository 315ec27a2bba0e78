"""Loop transformations as real CPU kernels (numba), their legality, and a small cache model.

* :mod:`.dependence`: distance vectors; legality of interchange, tiling, skewing, fusion, unroll-and-jam.
* :mod:`.cache_model`: cache misses of a matmul loop nest, by the textbook formula and by simulation.
* :mod:`.single`: unrolling, vectorization, peeling, parallelization, fusion on one loop.
* :mod:`.matmul`: interchange, tiling, unroll-and-jam and a register-blocked micro-kernel on matmul.
* :mod:`.wavefront`: skewing a dynamic-programming recurrence into parallel wavefronts.
* :mod:`.measure`: before/after timing of a transformation, and the recorded benchmark runs.

Importing this package compiles nothing; each kernel compiles (or loads from numba's cache) on its
first call.
"""

from mlsys_lab.loops.cache_model import (
    LOOP_ORDERS,
    inner_stride,
    misses_per_iteration,
    simulate_matmul_misses,
    tile_fits,
)
from mlsys_lab.loops.dependence import (
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

__all__ = [
    "LOOP_ORDERS", "inner_stride", "misses_per_iteration", "simulate_matmul_misses", "tile_fits",
    "fusion_legal", "interchange_legal", "is_legal", "legal_orders", "lexicographically_positive",
    "parallel_loops", "permute", "skew", "tiling_legal", "unroll_and_jam_legal",
]
