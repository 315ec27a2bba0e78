"""Why each step of lesson 04's SGEMM ladder is as fast as it is: occupancy and shared-memory passes, per step.

Two pieces of evidence the timing table alone does not give:

- **Occupancy** (:func:`mlsys_lab.occupancy.occupancy`, the course's one occupancy calculator): how many blocks
  of a step fit on one SM, from its registers per thread (ptxas, recorded on the H200), threads per block and
  shared memory per block, by the allocation rules of NVIDIA's occupancy calculator for compute capability 9.0.
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
from mlsys_lab.occupancy import SM90, WARP, Occupancy, SmLimits, occupancy
from mlsys_lab.validation import check_choice, check_int, check_str, check_type

PASS_BYTES = 128  # one pass: a 4-byte word from each of the 32 banks


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
