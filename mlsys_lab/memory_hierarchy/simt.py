"""Warp-level memory-access analysis, without a GPU: coalescing and shared-memory bank conflicts.

A GPU executes a load or store for the 32 threads of a warp at once (SIMT). What it costs depends
only on the 32 addresses:

* **global memory** is served in 32-byte *sectors* (4 sectors = one 128-byte cache line). A request
  costs as many sectors as distinct 32-byte blocks its addresses touch. Consecutive 4-byte words
  (``x[lane]``) need 4 sectors for 128 useful bytes: 100% efficiency. ``x[lane * 32]`` needs 32
  sectors for the same 128 bytes: 12.5%.
* **shared memory** has 32 banks, each 4 bytes wide; word ``w`` lives in bank ``w % 32``. A request
  takes as many passes ("wavefronts") as the largest number of *distinct* words asked of one bank.
  Threads that read the *same* word are served together (broadcast).

The functions take the byte addresses (or word indices) of one warp, or a ``(warps, 32)`` array of
them, so any index expression of a kernel can be analysed by evaluating it with NumPy for
``lane = np.arange(32)``. Source: NVIDIA CUDA C++ Best Practices Guide, "Coalesced Access to Global
Memory" and "Shared Memory and Memory Banks"; the numbers here are checked against the H200
timings recorded in ``mlsys_lab/data/memory_h200.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

import numpy as np

from mlsys_lab.validation import check_array, check_bool, check_choice, check_finite, check_int, check_number

WARP_SIZE = 32
SECTOR_BYTES = 32
N_BANKS = 32
BANK_BYTES = 4


def lanes() -> np.ndarray:
    """The 32 lane indices of a warp, 0..31."""
    return np.arange(WARP_SIZE)


def _warps(addresses, name: str) -> np.ndarray:
    array = np.asarray(addresses)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.shape[1] != WARP_SIZE or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be integers of shape (32,) or (warps, 32); got {np.shape(addresses)}")
    if np.any(array < 0):
        raise ValueError(f"{name} must be >= 0")
    return array.astype(np.int64)


# ---------------------------------------------------------------------------------- global memory
def sectors_per_request(
    byte_addresses, access_bytes: int = 4, sector_bytes: int = SECTOR_BYTES
) -> np.ndarray:
    """Distinct 32-byte sectors each warp's request touches. Shape (warps,).

    ``byte_addresses`` (32,) or (warps, 32): the first byte each lane accesses; each access covers
    ``access_bytes`` (4 for float, 16 for float4) and may straddle two sectors. ``sector_bytes``
    models another granularity (DRAM bursts of 64 bytes, for instance).
    """
    check_int("access_bytes", access_bytes, low=1, high=16)
    check_int("sector_bytes", sector_bytes, low=1, high=1 << 20)
    addresses = _warps(byte_addresses, "byte_addresses")
    first = addresses // sector_bytes
    last = (addresses + access_bytes - 1) // sector_bytes
    return _distinct_per_row(np.concatenate([first, last], axis=1))


def _distinct_per_row(values: np.ndarray) -> np.ndarray:
    """How many distinct values each row of a 2-D integer array holds (vectorized: sort, count changes)."""
    ordered = np.sort(values, axis=1)
    return 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)


def coalescing_efficiency(byte_addresses, access_bytes: int = 4) -> np.ndarray:
    """Fewest sectors that could carry the bytes the lanes ask for / sectors touched. Shape (warps,).

    1.0 means no request for the same data could be cheaper: ``x[lane]`` (4 of 4 sectors), but also a
    broadcast ``x[0]`` (1 of 1: 4 useful bytes in a 32-byte sector, yet the cheapest request there is).
    ``x[32 * lane]`` needs 4 sectors' worth of data and touches 32: 0.125.
    """
    addresses = _warps(byte_addresses, "byte_addresses")
    sectors = sectors_per_request(addresses, access_bytes)
    spans = addresses[:, :, None] + np.arange(access_bytes)
    useful = np.array([np.unique(row).size for row in spans.reshape(len(addresses), -1)])
    return -(-useful // SECTOR_BYTES) / sectors


def strided_addresses(stride: int, element_bytes: int = 4, offset: int = 0) -> np.ndarray:
    """Byte addresses of ``x[offset + lane * stride]`` for one warp (the ``read_strided`` kernel)."""
    check_int("stride", stride, low=0, high=2**24)  # addresses stay far inside int64
    check_int("offset", offset, low=0, high=2**40)
    return (offset + lanes() * stride) * check_int("element_bytes", element_bytes, low=1, high=16)


def strided_sectors(stride: int, element_bytes: int = 4) -> int:
    """Closed form for a warp reading ``x[lane * stride]`` from an aligned start: min(32, ceil(32 s b / 32)).

    ``element_bytes`` b is 1, 2, 4, 8 or 16; :func:`sectors_per_request` is the general count.
    """
    check_int("stride", stride, low=1, high=2**24)
    check_choice("element_bytes", element_bytes, (1, 2, 4, 8, 16))
    if stride * element_bytes >= SECTOR_BYTES:
        return WARP_SIZE
    return -(-WARP_SIZE * stride * element_bytes // SECTOR_BYTES)


def strided_copy_bytes(stride: int, sector_bytes: int = SECTOR_BYTES) -> float:
    """Bytes moved per element by out[i] = x[i * stride] (float32): the read's sectors / 32 lanes + the write.

    With 32-byte sectors: 8 bytes at stride 1, 36 from stride 8 on. ``sector_bytes=64`` models DRAM
    fetching pairs of sectors.
    """
    check_int("sector_bytes", sector_bytes, low=4, high=4096)
    sectors = sectors_per_request(strided_addresses(stride), 4, sector_bytes)[0]
    return float(sectors * sector_bytes / WARP_SIZE + 4)


def strided_copy_seconds(n: int, stride: int, bandwidth: float, sector_bytes: int = SECTOR_BYTES) -> float:
    """Time the traffic of out[i] = x[i * stride], i < n, takes at ``bandwidth`` bytes/s:
    n x :func:`strided_copy_bytes` / bandwidth (the floor a measured strided read is compared with)."""
    n = check_int("n", n, low=0)
    bandwidth = check_finite("bandwidth", bandwidth, low=0, low_inclusive=False)
    return n * strided_copy_bytes(stride, sector_bytes) / bandwidth


# ---------------------------------------------------------------------------------- shared memory
def bank_conflict_degree(word_indices) -> np.ndarray:
    """Passes each warp's 4-byte shared-memory request takes: max over banks of the distinct words asked of it.

    ``word_indices`` (32,) or (warps, 32): the 4-byte word each lane reads. 1 means conflict-free;
    lanes reading the same word share one pass (broadcast). Shape (warps,).
    """
    words = _warps(word_indices, "word_indices")
    return shared_passes(words * BANK_BYTES, BANK_BYTES)


def shared_passes(byte_addresses, access_bytes: int = 4) -> np.ndarray:
    """Passes of each warp's shared-memory request, lanes reading ``access_bytes`` (4, 8 or 16) from each address.

    A pass delivers one 4-byte word from each of the 32 banks (128 bytes). Lane L asks for the
    ``access_bytes / 4`` consecutive words from ``byte_addresses[L] // 4``; the request takes as many passes
    as the most *distinct* words asked of one bank (word ``w`` is in bank ``w % 32``; a word asked by
    several lanes is delivered once, a broadcast). A ``float4`` per lane, ``tile[lane]``, asks each bank for
    4 words: 4 passes, the fewest 512 bytes can take, so 16-byte accesses are conflict-free at 4.
    The hardware serves 8- and 16-byte requests half and quarter warps at a time; this count is the same
    whenever each phase is conflict-free, and a lower bound otherwise. Shape (warps,).
    """
    check_choice("access_bytes", access_bytes, (4, 8, 16))
    addresses = _warps(byte_addresses, "byte_addresses")
    if np.any(addresses % access_bytes):
        raise ValueError(f"byte_addresses must be multiples of access_bytes={access_bytes} (aligned accesses)")
    words = ((addresses // BANK_BYTES)[:, :, None] + np.arange(access_bytes // BANK_BYTES)).reshape(len(addresses), -1)
    ordered = np.sort(words, axis=1)
    first = np.ones(ordered.shape, dtype=bool)  # the first lane asking for each distinct word
    first[:, 1:] = np.diff(ordered, axis=1) != 0
    rows = np.repeat(np.arange(len(ordered)), ordered.shape[1])
    per_bank = np.zeros((len(ordered), N_BANKS), dtype=np.int64)
    np.add.at(per_bank, (rows, (ordered % N_BANKS).ravel()), first.ravel().astype(np.int64))
    return per_bank.max(axis=1)


def strided_bank_conflict(stride: int) -> int:
    """Closed form for ``words[lane * stride]``: gcd(stride, 32)-way (stride 0: a broadcast, 1 pass)."""
    check_int("stride", stride, low=0)
    return 1 if stride == 0 else gcd(stride, N_BANKS)


@dataclass(frozen=True)
class TransposeAccess:
    """The accesses of one warp in a 32 x 32 shared-memory transpose (``memory_hierarchy/shared.cu``)."""

    store_words: np.ndarray  # (32,) tile[ty][tx] written along a row
    load_words: np.ndarray  # (32,) tile[tx][ty] read down a column

    def __post_init__(self) -> None:
        for label in ("store_words", "load_words"):
            words = check_array(label, getattr(self, label), ndim=1, kinds="iu")
            if words.shape != (WARP_SIZE,) or words.min() < 0:
                raise ValueError(f"{label} must be {WARP_SIZE} word indices >= 0, one per lane; got shape "
                                 f"{words.shape}")

    @property
    def store_passes(self) -> int:
        return int(bank_conflict_degree(self.store_words)[0])

    @property
    def load_passes(self) -> int:
        return int(bank_conflict_degree(self.load_words)[0])


def transpose_tile_access(tile: int = 32, pad: int = 0, row: int = 0) -> TransposeAccess:
    """Words a warp touches storing tile[row][lane] and loading tile[lane][row]; rows are tile + pad long."""
    check_int("tile", tile, low=WARP_SIZE, high=WARP_SIZE)
    check_int("pad", pad, low=0, high=32)
    check_int("row", row, low=0, high=tile - 1)
    width = tile + pad
    return TransposeAccess(store_words=row * width + lanes(), load_words=lanes() * width + row)


# ------------------------------------------------------------------------------- one warp, either space
SPACES = ("global (32-byte sectors)", "shared (32 banks)")


@dataclass(frozen=True)
class WarpAccess:
    """One warp's request: where each lane goes and what it costs."""

    space: str
    slots: np.ndarray  # (32,) sector index (global, relative to the first) or bank (shared) of each lane
    cost: int  # sectors (global) or passes (shared)
    best_cost: int  # the cost of the contiguous pattern of the same size
    efficiency: float  # best_cost / cost: 1.0 when no request for the same data could be cheaper

    def __post_init__(self) -> None:
        check_choice("space", self.space, SPACES)
        slots = check_array("slots", self.slots, ndim=1, kinds="iu")
        if slots.shape != (WARP_SIZE,) or slots.min() < 0:
            raise ValueError(f"slots must be {WARP_SIZE} indices >= 0, one per lane; got shape {slots.shape}")
        check_int("cost", self.cost, low=1)
        check_int("best_cost", self.best_cost, low=1)
        check_number("efficiency", self.efficiency, low=0, high=1, low_inclusive=False)


def warp_access(space: str, stride: int, offset: int, element_bytes: int) -> WarpAccess:
    """Analyse ``x[offset + lane * stride]`` for one warp in ``space`` (one of ``SPACES``), elements of
    ``element_bytes``: sectors and coalescing efficiency in global memory, bank passes in shared memory.

    In shared memory ``slots`` is the bank of each lane's first word; efficiency is the contiguous
    pattern's passes over this one's, at most 1 (a broadcast, stride 0, is 1 pass: the cheapest request).
    """
    check_choice("space", space, SPACES)
    check_int("stride", stride, low=0, high=2**24)
    check_int("offset", offset, low=0, high=2**40)
    if space == SPACES[0]:
        addresses = strided_addresses(stride, element_bytes, offset)
        cost = int(sectors_per_request(addresses, element_bytes)[0])
        best = int(sectors_per_request(strided_addresses(1, element_bytes), element_bytes)[0])
        slots = addresses // SECTOR_BYTES - addresses.min() // SECTOR_BYTES
        efficiency = float(coalescing_efficiency(addresses, element_bytes)[0])
        return WarpAccess(space, slots, cost, best, efficiency)
    addresses = strided_addresses(stride, element_bytes, offset)
    cost = int(shared_passes(addresses, element_bytes)[0])
    best = int(shared_passes(strided_addresses(1, element_bytes), element_bytes)[0])
    return WarpAccess(space, (addresses // BANK_BYTES) % N_BANKS, cost, best, min(1.0, best / cost))


# ------------------------------------------------------------------------------- kernel summaries
def sgemm_naive_addresses(k_index: int, n_k: int, n_cols: int, coalesced: bool) -> dict[str, np.ndarray]:
    """Byte addresses a warp of the naive (or coalesced) SGEMM reads of A and B at step ``k_index``.

    naive: lane walks rows, so A[row = lane][k] is strided by n_k floats and B[k][col] is one word;
    coalesced: lane walks columns, so A[row][k] is one word (broadcast) and B[k][col = lane] is contiguous.
    """
    check_int("n_k", n_k, low=1, high=2**20)
    check_int("k_index", k_index, low=0, high=n_k - 1)
    check_int("n_cols", n_cols, low=1, high=2**20)
    check_bool("coalesced", coalesced)
    lane = lanes()
    if coalesced:
        a = np.full(WARP_SIZE, k_index) * 4
        b = (k_index * n_cols + lane) * 4
    else:
        a = (lane * n_k + k_index) * 4
        b = np.full(WARP_SIZE, k_index * n_cols) * 4
    return {"A": a, "B": b}
