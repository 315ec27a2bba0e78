"""Why each step of lesson 04's SGEMM ladder is as fast as it is: occupancy and shared-memory passes, per step.

Two pieces of evidence the timing table alone does not give:

- **Occupancy** (:func:`occupancy`): how many blocks of a step fit on one SM, from its registers per thread
  (ptxas, recorded on the H200), threads per block and shared memory per block, with the allocation rules of
  NVIDIA's occupancy calculator for compute capability 9.0: registers are handed out per warp in units of 256
  (so 130 registers cost as much as 136) from four sub-partitions of 16,384 each, every block reserves 1 KB of
  shared memory, and an SM holds at most 64 warps and 32 blocks.
- **Shared-memory passes** (:func:`shared_requests`): each shared-memory load and store of a step's inner loop,
  written out as the byte address each thread of a block asks for (the index expressions of
  ``kernels/memory_hierarchy/sgemm.cu``), fed to the course's bank model
  (:func:`mlsys_lab.memory_hierarchy.simt.shared_passes`). ``ideal`` is the fewest passes the bytes could take
  (distinct bytes / 128 per pass), so ``passes / ideal`` is the conflict degree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.kernels.memory_hierarchy.sgemm import STEPS, SgemmStep
from mlsys_lab.memory_hierarchy.simt import shared_passes
from mlsys_lab.validation import check_choice, check_int, check_number, check_str, check_type

WARP = 32
PASS_BYTES = 128  # one pass: a 4-byte word from each of the 32 banks


@dataclass(frozen=True)
class SmLimits:
    """What one SM can hold (CUDA C Programming Guide, "Compute Capabilities", table of technical
    specifications; allocation granularities as in NVIDIA's occupancy calculator)."""

    registers: int = 65_536
    sub_partitions: int = 4  # registers are split evenly between the 4 warp schedulers
    register_unit: int = 256  # registers are allocated per warp in multiples of this
    max_registers_per_thread: int = 255
    max_warps: int = 64
    max_blocks: int = 32
    shared_bytes: int = 228 * 1024
    reserved_shared_per_block: int = 1024
    shared_unit: int = 128

    def __post_init__(self) -> None:
        for name in ("registers", "sub_partitions", "register_unit", "max_registers_per_thread", "max_warps",
                     "max_blocks", "shared_bytes", "shared_unit"):
            check_int(name, getattr(self, name), low=1, high=2**24)
        check_int("reserved_shared_per_block", self.reserved_shared_per_block, low=0, high=self.shared_bytes)


SM90 = SmLimits()  # H100 / H200


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks of a kernel per SM, the warps they hold, and what stops one more block."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float  # of the SM's warp slots
    limited_by: str  # "registers", "shared memory", "warps" or "blocks"

    def __post_init__(self) -> None:
        check_int("blocks_per_sm", self.blocks_per_sm, low=0)
        check_int("warps_per_sm", self.warps_per_sm, low=0)
        check_number("fraction", self.fraction, low=0.0, high=1.0)
        check_choice("limited_by", self.limited_by, ("registers", "shared memory", "warps", "blocks"))


def occupancy(registers_per_thread: int, threads_per_block: int, shared_bytes_per_block: int,
              limits: SmLimits = SM90) -> Occupancy:
    """Blocks per SM from the three resources a block takes (the occupancy calculator's rules).

    >>> occupancy(255, 128, 16384).blocks_per_sm   # 256 x 32 registers per warp: 2 warps per sub-partition
    2
    """
    check_type("limits", limits, SmLimits)
    check_int("registers_per_thread", registers_per_thread, low=1, high=limits.max_registers_per_thread)
    check_int("threads_per_block", threads_per_block, low=1, high=1024)
    check_int("shared_bytes_per_block", shared_bytes_per_block, low=0, high=limits.shared_bytes)
    warps = -(-threads_per_block // WARP)
    per_warp = -(-registers_per_thread * WARP // limits.register_unit) * limits.register_unit
    warps_by_registers = (limits.registers // limits.sub_partitions // per_warp) * limits.sub_partitions
    shared = -(-(shared_bytes_per_block + limits.reserved_shared_per_block) // limits.shared_unit) * limits.shared_unit
    by = {"warps": limits.max_warps // warps, "blocks": limits.max_blocks,  # ties name the first of these
          "shared memory": limits.shared_bytes // shared if shared else limits.max_blocks,  # none taken: no limit
          "registers": warps_by_registers // warps}
    limiter = min(by, key=by.get)
    blocks = by[limiter]
    return Occupancy(blocks, blocks * warps, blocks * warps / limits.max_warps, limiter)


def shared_bytes(step: SgemmStep) -> int:
    """Static shared memory of a step's block: the A and B tiles, twice when double-buffered."""
    check_type("step", step, SgemmStep)
    if not step.params:
        return 2 * 32 * 32 * 4 if step.name == "smem" else 0
    missing = [key for key in ("BM", "BN", "BK") if key not in step.params]
    if missing:
        raise ValueError(f"step.params must name the block tile BM, BN, BK (template parameters); "
                         f"{', '.join(missing)} missing from {dict(step.params)!r:.80}")
    bm, bn, bk = step.tile
    stages = 2 if step.function in ("sgemm_double_buffer", "sgemm_warptile_db") else 1
    return stages * (bm * bk + bk * bn) * 4


@dataclass(frozen=True)
class SharedRequest:
    """One shared-memory instruction of a step: passes per warp by the bank model, and the fewest possible."""

    label: str
    access_bytes: int
    passes: int  # the worst warp of the block
    ideal: int

    def __post_init__(self) -> None:
        check_str("label", self.label)
        check_int("access_bytes", self.access_bytes, low=1, high=16)
        check_int("passes", self.passes, low=1)
        check_int("ideal", self.ideal, low=1)

    @property
    def conflict_degree(self) -> float:
        return self.passes / self.ideal


def _request(label: str, addresses: np.ndarray, access_bytes: int) -> SharedRequest:
    """``addresses`` (threads,): the first byte each thread of the block asks for."""
    warps = addresses.reshape(-1, WARP)
    passes = int(shared_passes(warps, access_bytes).max())
    distinct = max(len(np.unique(w)) for w in warps)  # overlapping requests are rare here; counted whole
    return SharedRequest(label, access_bytes, passes, max(1, -(-distinct * access_bytes // PASS_BYTES)))


def _tile_loader_stores(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    """``TileLoader::store``: A transposed one float at a time, B as float4 (first vector of each)."""
    a_row, a_col = tid // (p["BK"] // 4), tid % (p["BK"] // 4)
    b_row, b_col = tid // (p["BN"] // 4), tid % (p["BN"] // 4)
    return [_request("As store (transposed, 4 B)", ((a_col * 4) * p["BM"] + a_row) * 4, 4),
            _request("Bs store (float4)", (b_row * p["BN"] + b_col * 4) * 4, 16)]


def _smem(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    ty, tx = tid // 32, tid % 32
    return [_request("As/Bs store", (ty * 32 + tx) * 4, 4), _request("As[ty][k] read", ty * 32 * 4, 4),
            _request("Bs[k][tx] read", tx * 4, 4)]


def _blocktile_1d(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    thread_col, thread_row = tid % p["BN"], tid // p["BN"]
    return [_request("As store", tid * 4, 4), _request("Bs store", tid * 4, 4),
            _request("Bs[k][col] read", thread_col * 4, 4),
            _request("As[row*TM+i][k] read", thread_row * p["TM"] * p["BK"] * 4, 4)]


def _blocktile_2d(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    thread_col, thread_row = tid % (p["BN"] // p["TN"]), tid // (p["BN"] // p["TN"])
    a_row, a_col = tid // p["BK"], tid % p["BK"]
    b_row, b_col = tid // p["BN"], tid % p["BN"]
    return [_request("As store", (a_row * p["BK"] + a_col) * 4, 4),
            _request("Bs store", (b_row * p["BN"] + b_col) * 4, 4),
            _request("As[row*TM+i][k] read", thread_row * p["TM"] * p["BK"] * 4, 4),
            _request("Bs[k][col*TN+j] read", thread_col * p["TN"] * 4, 4)]


def _thread_tile(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    thread_col, thread_row = tid % (p["BN"] // p["TN"]), tid // (p["BN"] // p["TN"])
    return [*_tile_loader_stores(p, tid),
            _request("As[k][row*TM+i] read (float4)", thread_row * p["TM"] * 4, 16),
            _request("Bs[k][col*TN+j] read (float4)", thread_col * p["TN"] * 4, 16)]


def _warp_tile(p: dict, tid: np.ndarray) -> list[SharedRequest]:
    wsubn = p["WN"] // p["WNITER"]
    warp, lane = tid // WARP, tid % WARP
    warp_col, warp_row = warp % (p["BN"] // p["WN"]), warp // (p["BN"] // p["WN"])
    t_col, t_row = lane % (wsubn // p["TN"]), lane // (wsubn // p["TN"])
    return [*_tile_loader_stores(p, tid),
            _request("As[k][warp row + t_row*TM] read (float4)", (warp_row * p["WM"] + t_row * p["TM"]) * 4, 16),
            _request("Bs[k][warp col + t_col*TN] read (float4)", (warp_col * p["WN"] + t_col * p["TN"]) * 4, 16)]


_REQUESTS: dict[str, Callable[[dict, np.ndarray], list[SharedRequest]]] = {
    "sgemm_smem": _smem, "sgemm_blocktile_1d": _blocktile_1d, "sgemm_blocktile_2d": _blocktile_2d,
    "sgemm_vectorized": _thread_tile, "sgemm_double_buffer": _thread_tile,
    "sgemm_warptile": _warp_tile, "sgemm_warptile_db": _warp_tile,
}


def shared_requests(step: str) -> list[SharedRequest]:
    """The shared-memory loads and stores of one step (first iteration of each unrolled loop: the others
    differ by a constant offset, which moves every lane to the same degree), by the course's bank model.
    The naive and coalesced steps use no shared memory: an empty list."""
    check_choice("step", step, STEPS)
    s = STEPS[step]
    if s.function not in _REQUESTS:
        return []
    return _REQUESTS[s.function](s.params, np.arange(s.threads))


@dataclass(frozen=True)
class StepEvidence:
    """One row of the ladder's evidence table."""

    step: str
    registers: int
    threads: int
    shared_bytes: int
    occupancy: Occupancy
    worst_request: SharedRequest | None

    def __post_init__(self) -> None:
        check_str("step", self.step)
        for name in ("registers", "threads"):
            check_int(name, getattr(self, name), low=1)
        check_int("shared_bytes", self.shared_bytes, low=0)
        check_type("occupancy", self.occupancy, Occupancy)
        if self.worst_request is not None:
            check_type("worst_request", self.worst_request, SharedRequest)


def ladder_evidence(record: dict, limits: SmLimits = SM90) -> list[StepEvidence]:
    """Occupancy and the worst-conflicted shared request of every step, from the recorded registers
    (``record["steps"]``: the ``sgemm`` part of ``memory_h200.json``)."""
    check_type("record", record, dict)
    if "steps" not in record:
        raise ValueError("record must be the sgemm part of memory_h200.json (with 'steps')")
    check_type("limits", limits, SmLimits)
    rows = []
    for row in record["steps"]:
        step = STEPS[row["step"]]
        requests = shared_requests(step.name)
        worst = max(requests, key=lambda r: (r.conflict_degree, r.passes), default=None)
        rows.append(StepEvidence(step.name, int(row["num_regs"]), step.threads, shared_bytes(step),
                                 occupancy(int(row["num_regs"]), step.threads, shared_bytes(step), limits), worst))
    return rows
