"""Lesson 04, the GPU memory hierarchy: a warp-level model of global and shared memory accesses.

* :mod:`.simt`: what one warp's 32 addresses cost, without a GPU: 32-byte sectors and coalescing in global
  memory, bank conflicts in shared memory, the strided-read traffic, the transpose tile, the naive SGEMM's
  accesses, and :func:`warp_access` (either space, for the explorer); :func:`shared_passes` for 4-, 8- and
  16-byte shared-memory accesses.
* :mod:`.warp_sim`: the same model made executable: kernels written in Python, run block by block, whose
  every warp request to a :class:`GlobalArray` or :class:`SharedArray` is counted in sectors or bank passes.
* :mod:`.tensor_cores`: the BF16 tensor-core GEMM ladder and FlashAttention-2 as recorded on the H200, with
  each kernel's bank conflicts recomputed by the bank model, and the tensor-core ridge.
* :mod:`.sgemm_ladder`: why each SGEMM step is as fast as it is: occupancy per step (the occupancy
  calculator's rules for compute capability 9.0) and every shared-memory request by the bank model.

The kernels the lesson measures (one module per memory space, fused kernels, the SGEMM ladder) are in
:mod:`mlsys_lab.kernels.memory_hierarchy`; the recorded H200 run is ``records.load("memory_h200")``.
"""

from mlsys_lab.memory_hierarchy.sgemm_ladder import ladder_evidence, shared_requests
from mlsys_lab.memory_hierarchy.simt import (
    SPACES,
    WarpAccess,
    bank_conflict_degree,
    coalescing_efficiency,
    sectors_per_request,
    sgemm_naive_addresses,
    shared_passes,
    strided_addresses,
    strided_bank_conflict,
    strided_copy_bytes,
    strided_copy_seconds,
    strided_sectors,
    transpose_tile_access,
    warp_access,
)
from mlsys_lab.memory_hierarchy.tensor_cores import KernelRow, attention_rows, gemm_bank_passes, gemm_ladder
from mlsys_lab.memory_hierarchy.warp_sim import GlobalArray, SharedArray, launch, run_reduce, run_transpose
from mlsys_lab.occupancy import Occupancy, occupancy

__all__ = [
    "sectors_per_request", "coalescing_efficiency", "strided_addresses", "strided_sectors", "strided_copy_bytes",
    "strided_copy_seconds", "bank_conflict_degree", "strided_bank_conflict", "transpose_tile_access",
    "sgemm_naive_addresses", "SPACES", "WarpAccess", "warp_access", "shared_passes",
    "GlobalArray", "SharedArray", "launch", "run_transpose", "run_reduce",
    "KernelRow", "gemm_ladder", "attention_rows", "gemm_bank_passes",
    "Occupancy", "occupancy", "shared_requests", "ladder_evidence",
]
