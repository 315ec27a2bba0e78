"""Collectives over a group of simulated ranks holding N-D tensors, with the bytes each sends logged.

A "group" of ``p`` ranks is a Python list of ``p`` arrays (NumPy or CuPy). The collectives are lesson
07's (:mod:`mlsys_lab.collectives.simulate`): real ring and pairwise message passing through a
byte-counting :class:`~mlsys_lab.collectives.network.Network`. This module only adapts them to
tensors (flattens them, or moves ``axis`` to the front, for the 1-D buffers those functions take,
and reshapes back) and keeps a :class:`CommLog`. For a buffer of ``n`` bytes per rank (Patarasuk &
Yuan 2009; Thakur et al. 2005):

================  ==========================  ===============================
collective        result on each rank          bytes sent per rank (ring)
================  ==========================  ===============================
all_reduce        sum of all buffers           2 (p-1)/p · n
reduce_scatter    one 1/p slice of the sum     (p-1)/p · n
all_gather        concatenation of all         (p-1) · n   (n = one shard)
all_to_all        slice j of rank i -> rank j  (p-1)/p · n   (pairwise)
send (p2p)        a buffer to one neighbour    n
================  ==========================  ===============================

all_reduce = reduce_scatter then all_gather, which is why ZeRO-1/2 move as many bytes as DDP.
The partition / replicate primitives of the notes live here too.

What each lesson counts: lesson 07's ``CollectiveResult`` keeps every rank's bytes sent and
received and the rounds; a :class:`CommLog` keeps, per collective name, the number of calls and the
sum over calls of what the *busiest* rank sent (the rank that sets the time). When p divides the
element count every rank sends the table's figure; otherwise ring chunks differ by one element and
the busiest rank sends a little more.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from mlsys_lab.backend import module_of
from mlsys_lab.collectives import simulate
from mlsys_lab.collectives.network import CollectiveResult
from mlsys_lab.validation import check_array, check_int, check_type


@dataclass
class CommLog:
    """Bytes sent by the busiest rank and number of calls, per collective name."""

    bytes_sent: Counter = field(default_factory=Counter)
    calls: Counter = field(default_factory=Counter)

    def record(self, name: str, n_bytes: float) -> None:
        self.bytes_sent[name] += float(n_bytes)
        self.calls[name] += 1

    @property
    def total_bytes(self) -> float:
        return float(sum(self.bytes_sent.values()))


def _log(log: CommLog | None, name: str, result: CollectiveResult) -> None:
    check_type("log", log, (CommLog, type(None)))
    if log is not None:
        log.record(name, int(result.bytes_sent.max()))


def _check_group(buffers: list, name: str = "buffers") -> int:
    if not isinstance(buffers, (list, tuple)) or len(buffers) < 1:
        raise ValueError(f"{name} must be a non-empty list of per-rank arrays; got {type(buffers).__name__}")
    for b in buffers:
        if not hasattr(b, "shape"):
            raise TypeError(f"{name} must hold per-rank arrays (NumPy or CuPy); got {type(b).__name__} {b!r:.40}")
    shapes = {tuple(b.shape) for b in buffers}
    if len(shapes) != 1:
        raise ValueError(f"{name} must hold arrays of one shape on every rank; got shapes {sorted(shapes)}")
    return len(buffers)


def _tensor(array):
    """A rank's tensor is an array (NumPy or CuPy), not a Python number or list: TypeError naming ``array``."""
    if not hasattr(array, "shape"):
        raise TypeError(f"array must be an array (NumPy or CuPy); got {type(array).__name__} {array!r:.40}")
    return array


def _check_splits(shape: tuple, n_parts: int, axis: int) -> None:
    if shape[axis] % n_parts:
        raise ValueError(f"n_parts must divide array.shape[{axis}]={shape[axis]}; got {n_parts} (along axis {axis})")


def partition(array, n_parts: int, axis: int = 0) -> list:
    """Split ``array`` into ``n_parts`` equal pieces along ``axis`` (the notes' *partitioning*)."""
    n_parts = check_int("n_parts", n_parts, low=1)
    if (ndim := check_array("array", array, kinds="fiub").ndim) == 0:
        raise ValueError("array must have at least one axis to partition; got a scalar")
    check_int("axis", axis, low=-ndim, high=ndim - 1)
    _check_splits(array.shape, n_parts, axis)
    return [piece.copy() for piece in module_of(array).split(array, n_parts, axis=axis)]


def replicate(array, n_copies: int) -> list:
    """One full copy of ``array`` per rank (the notes' *replication*)."""
    n_copies = check_int("n_copies", n_copies, low=1, high=4096)  # simulated ranks
    array = check_array("array", _tensor(array), kinds="fiub")  # an array comes back as itself
    return [array.copy() for _ in range(n_copies)]


def all_reduce(buffers: list, log: CommLog | None = None) -> list:
    """Every rank ends with the elementwise sum of all ranks' buffers (ring: reduce-scatter, all-gather)."""
    _check_group(buffers)
    shape = buffers[0].shape
    result = simulate.ring_allreduce([b.reshape(-1) for b in buffers])
    _log(log, "all_reduce", result)
    return [out.reshape(shape) for out in result.outputs]


def reduce_scatter(buffers: list, axis: int = 0, log: CommLog | None = None) -> list:
    """Rank ``r`` ends with slice ``r`` (along ``axis``) of the sum of all buffers (ring)."""
    p = _check_group(buffers)
    check_int("axis", axis, low=-len(buffers[0].shape), high=len(buffers[0].shape) - 1)
    _check_splits(buffers[0].shape, p, axis)
    xp = module_of(*buffers)
    front = [xp.moveaxis(b, axis, 0) for b in buffers]                       # p × (k, ...)
    result = simulate.reduce_scatter([f.reshape(-1) for f in front])
    _log(log, "reduce_scatter", result)
    piece = (front[0].shape[0] // p, *front[0].shape[1:])                   # (k/p, ...)
    return [xp.ascontiguousarray(xp.moveaxis(out.reshape(piece), 0, axis)) for out in result.outputs]


def all_gather(shards: list, axis: int = 0, log: CommLog | None = None) -> list:
    """Every rank ends with all ranks' shards concatenated along ``axis`` (ring)."""
    p = _check_group(shards, "shards")
    check_int("axis", axis, low=-len(shards[0].shape), high=len(shards[0].shape) - 1)
    xp = module_of(*shards)
    front = [xp.moveaxis(s, axis, 0) for s in shards]                        # p × (k, ...)
    result = simulate.all_gather([f.reshape(-1) for f in front])
    _log(log, "all_gather", result)
    full = (p * front[0].shape[0], *front[0].shape[1:])                      # (p·k, ...)
    return [xp.ascontiguousarray(xp.moveaxis(out.reshape(full), 0, axis)) for out in result.outputs]


def all_to_all(send: list[list], log: CommLog | None = None) -> list[list]:
    """``send[i][j]`` is what rank i sends to rank j; returns ``recv`` with ``recv[j][i] = send[i][j]``.

    Pieces may differ in size (MoE token dispatch): :func:`~mlsys_lab.collectives.simulate.all_to_all_pieces`.
    The log records what the busiest rank sends to the others, since the slowest rank sets the time.
    """
    check_type("log", log, (CommLog, type(None)))
    result = simulate.all_to_all_pieces(send)
    _log(log, "all_to_all", result)
    return result.outputs


def send(array, log: CommLog | None = None):
    """Point-to-point transfer to the next pipeline stage (returns a copy, as the receiver holds)."""
    array = check_array("array", _tensor(array), kinds="fiub")  # an array comes back as itself
    if log is not None:
        check_type("log", log, CommLog)
    if log is not None:
        log.record("send", array.nbytes)
    return array.copy()
