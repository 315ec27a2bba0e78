"""Lesson 04, the GPU memory hierarchy: a warp-level model of global and shared memory accesses.

* :mod:`.simt`: what one warp's 32 addresses cost, without a GPU: 32-byte sectors and coalescing in global
  memory, bank conflicts in shared memory, the strided-read traffic, the transpose tile, the naive SGEMM's
  accesses, and :func:`warp_access` (either space, for the explorer).

The kernels the lesson measures (one module per memory space, fused kernels, the SGEMM ladder) are in
:mod:`mlsys_lab.kernels.memory_hierarchy`; the recorded H200 run is ``records.load("memory_h200")``.
"""

from mlsys_lab.memory_hierarchy.simt import (
    SPACES,
    WarpAccess,
    bank_conflict_degree,
    coalescing_efficiency,
    sectors_per_request,
    sgemm_naive_addresses,
    strided_addresses,
    strided_bank_conflict,
    strided_copy_bytes,
    strided_copy_seconds,
    strided_sectors,
    transpose_tile_access,
    warp_access,
)

__all__ = [
    "sectors_per_request", "coalescing_efficiency", "strided_addresses", "strided_sectors", "strided_copy_bytes",
    "strided_copy_seconds", "bank_conflict_degree", "strided_bank_conflict", "transpose_tile_access",
    "sgemm_naive_addresses", "SPACES", "WarpAccess", "warp_access",
]
