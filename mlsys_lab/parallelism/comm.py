"""Simulated collectives over a list of per-rank arrays, counting the bytes each rank sends.

A "group" of ``p`` ranks is a Python list of ``p`` arrays. Each collective returns the list every
rank holds afterwards and, when given a :class:`CommLog`, records what one rank sends under the
bandwidth-optimal ring algorithm (Patarasuk & Yuan 2009; Thakur et al. 2005), for a buffer of
``n`` bytes per rank:

================  ==========================  ===============================
collective        result on each rank          bytes sent per rank (ring)
================  ==========================  ===============================
all_reduce        sum of all buffers           2 (p-1)/p · n
reduce_scatter    one 1/p slice of the sum     (p-1)/p · n
all_gather        concatenation of all         (p-1) · n   (n = one shard)
all_to_all        slice j of rank i -> rank j  (p-1)/p · n
send (p2p)        a buffer to one neighbour    n
================  ==========================  ===============================

all_reduce = reduce_scatter then all_gather, which is why ZeRO-1/2 move as many bytes as DDP.
The partition / replicate primitives of the notes live here too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mlsys_lab.backend import xp
from mlsys_lab.validation import check_int


@dataclass
class CommLog:
    """Bytes sent by one rank and number of calls, per collective name."""

    bytes_sent: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)

    def record(self, name: str, n_bytes: float) -> None:
        self.bytes_sent[name] += float(n_bytes)
        self.calls[name] += 1

    @property
    def total_bytes(self) -> float:
        return float(sum(self.bytes_sent.values()))


def _check_group(buffers: list, name: str = "buffers") -> int:
    if not isinstance(buffers, (list, tuple)) or len(buffers) < 1:
        raise ValueError(f"{name} must be a non-empty list of per-rank arrays; got {type(buffers).__name__}")
    shapes = {tuple(b.shape) for b in buffers}
    if len(shapes) != 1:
        raise ValueError(f"{name} must hold arrays of one shape on every rank; got shapes {sorted(shapes)}")
    return len(buffers)


def partition(array, n_parts: int, axis: int = 0) -> list:
    """Split ``array`` into ``n_parts`` equal pieces along ``axis`` (the notes' *partitioning*)."""
    n_parts = check_int("n_parts", n_parts, low=1)
    if array.shape[axis] % n_parts:
        raise ValueError(f"n_parts must divide array.shape[{axis}]={array.shape[axis]}; got {n_parts}")
    return [piece.copy() for piece in xp.split(array, n_parts, axis=axis)]


def replicate(array, n_copies: int) -> list:
    """One full copy of ``array`` per rank (the notes' *replication*)."""
    n_copies = check_int("n_copies", n_copies, low=1)
    return [array.copy() for _ in range(n_copies)]


def all_reduce(buffers: list, log: CommLog | None = None) -> list:
    """Every rank ends with the elementwise sum of all ranks' buffers."""
    p = _check_group(buffers)
    total = buffers[0].copy()
    for b in buffers[1:]:
        total += b
    if log is not None:
        log.record("all_reduce", 2 * (p - 1) / p * buffers[0].nbytes)
    return [total.copy() for _ in range(p)]


def reduce_scatter(buffers: list, axis: int = 0, log: CommLog | None = None) -> list:
    """Rank ``r`` ends with slice ``r`` (along ``axis``) of the sum of all buffers."""
    p = _check_group(buffers)
    total = buffers[0].copy()
    for b in buffers[1:]:
        total += b
    if log is not None:
        log.record("reduce_scatter", (p - 1) / p * buffers[0].nbytes)
    return partition(total, p, axis=axis)


def all_gather(shards: list, axis: int = 0, log: CommLog | None = None) -> list:
    """Every rank ends with all ranks' shards concatenated along ``axis``."""
    p = _check_group(shards, "shards")
    full = xp.concatenate(shards, axis=axis)
    if log is not None:
        log.record("all_gather", (p - 1) * shards[0].nbytes)
    return [full.copy() for _ in range(p)]


def all_to_all(send: list[list], log: CommLog | None = None) -> list[list]:
    """``send[i][j]`` is what rank i sends to rank j; returns ``recv`` with ``recv[j][i] = send[i][j]``.

    Pieces may differ in size (MoE token dispatch). The log records the largest number of bytes
    any rank sends to others, since the slowest rank sets the time.
    """
    p = len(send)
    if p < 1 or any(len(row) != p for row in send):
        raise ValueError(f"send must be a p x p nested list of arrays; got {p} rows of lengths "
                         f"{[len(row) for row in send]}")
    if log is not None:
        worst = max(sum(send[i][j].nbytes for j in range(p) if j != i) for i in range(p))
        log.record("all_to_all", worst)
    return [[send[i][j] for i in range(p)] for j in range(p)]


def send(array, log: CommLog | None = None):
    """Point-to-point transfer to the next pipeline stage (returns a copy, as the receiver holds)."""
    if log is not None:
        log.record("send", array.nbytes)
    return array.copy()
