"""Data parallelism over real MPI ranks, through the learner's own simulated-network pieces.

Lesson 07's ``ring_allreduce(buffers, net)`` is written for simulated ranks: one process holds every rank's buffer
and moves data only with ``net.exchange([(src, dst, array), ...])``. Its check proves that rank r's result is built
from rank r's own buffer and what ``exchange`` delivered to it. That is exactly what lets the same function run on
real ranks: every MPI process runs it whole (SPMD) with its own buffer at its own index (the other entries are
stand-ins of the same shape), and :class:`MpiNetwork` turns each ``exchange`` round into one real ``Sendrecv`` of
the message this rank sends and the one it receives. The stand-ins' arithmetic is wasted work on each process;
rank r's entry of the result is the true sum.

:class:`MpiGroup` is the capstone exercise's ``group``: ``group.all_reduce(buffers)`` runs the ring (the learner's,
or the course's :func:`mlsys_lab.collectives.mpi_ring.ring_allreduce_mpi`) on this rank's buffer and hands every
entry the sum. :func:`average_gradients` is the course's answer to the exercise: one flat buffer per rank (a single
bucket), each rank's gradient weighted by its token count, divided by the global count.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from mlsys_lab.collectives import simulate
from mlsys_lab.collectives.mpi_ring import ring_allreduce_mpi
from mlsys_lab.parallelism import comm as tensor_comm
from mlsys_lab.validation import check_int, check_sequence


class MpiNetwork:
    """``exchange(messages)`` of :class:`mlsys_lab.collectives.network.Network`, run by every rank over MPI.

    Each process sees the whole round's messages; it sends the one whose ``src`` is its rank and receives the one
    whose ``dst`` is its rank (at most one each, as on the simulated network). The returned list holds the received
    array at that message's index and copies of the sent arrays elsewhere (other ranks' business: stand-ins).
    """

    def __init__(self, comm) -> None:
        self.comm, self.rank, self.n_ranks = comm, comm.Get_rank(), comm.Get_size()
        self.steps, self.bytes_sent = 0, 0

    def exchange(self, messages):
        outgoing = [(i, dst, data) for i, (src, dst, data) in enumerate(messages) if src == self.rank]
        incoming = [(i, src, data) for i, (src, dst, data) in enumerate(messages) if dst == self.rank]
        if len(outgoing) > 1 or len(incoming) > 1:
            raise ValueError(f"rank {self.rank} sends {len(outgoing)} and receives {len(incoming)} messages in one "
                             "round; a round allows one of each")
        self.steps += 1
        received = None
        if incoming:
            received = np.empty_like(np.asarray(incoming[0][2]))
        if outgoing:
            sent = np.ascontiguousarray(outgoing[0][2])
            self.bytes_sent += sent.nbytes
        if outgoing and incoming:
            self.comm.Sendrecv(sent, dest=outgoing[0][1], recvbuf=received, source=incoming[0][1])
        elif outgoing:
            self.comm.Send(sent, dest=outgoing[0][1])
        elif incoming:
            self.comm.Recv(received, source=incoming[0][1])
        at = incoming[0][0] if incoming else -1
        return [received if i == at else np.array(data, copy=True) for i, (_, _, data) in enumerate(messages)]


def ring_allreduce_on_ranks(buffers, net):
    """The course's ring with the exercise's signature: over MPI on an :class:`MpiNetwork` (this rank's buffer
    goes round the real ring), else lesson 07's simulated ring. Returns one summed array per rank."""
    buffers = check_sequence("buffers", buffers, min_size=1)
    if not callable(getattr(net, "exchange", None)):
        raise TypeError(f"net must be a network with exchange(messages); got {type(net).__name__}")
    if isinstance(net, MpiNetwork):
        own = np.ascontiguousarray(buffers[net.rank]).reshape(-1)
        out = np.empty_like(own)
        ring_allreduce_mpi(net.comm, own, out)
        p = net.n_ranks
        net.steps += 2 * (p - 1)
        net.bytes_sent += 2 * (p - 1) * (-(-own.size // p)) * own.itemsize if p > 1 else 0
        return [out if r == net.rank else out.copy() for r in range(p)]
    return simulate.ring_allreduce(list(buffers)).outputs


class MpiGroup:
    """The exercise's ``group`` on real ranks: ``all_reduce(buffers)`` sums this rank's entry over all ranks.

    ``ring`` is a ``ring_allreduce(buffers, net)``: the learner's piece or :func:`ring_allreduce_on_ranks`. Only
    ``buffers[rank]`` is read; every entry of the answer is (a copy of) the sum. Keeps the calls, the seconds
    spent in them and the bytes this rank sent.
    """

    def __init__(self, comm, ring: Callable) -> None:
        self.comm, self.ring = comm, ring
        self.rank, self.n_ranks = comm.Get_rank(), comm.Get_size()
        self.net = MpiNetwork(comm)
        self.calls, self.seconds = 0, 0.0

    def all_reduce(self, buffers):
        if len(buffers) != self.n_ranks:
            raise ValueError(f"all_reduce takes one buffer per rank ({self.n_ranks}); got {len(buffers)}")
        own = np.asarray(buffers[self.rank])
        flat = np.ascontiguousarray(own).reshape(-1)
        stand_ins = [flat if r == self.rank else np.zeros_like(flat) for r in range(self.n_ranks)]
        start = time.perf_counter()
        summed = np.asarray(self.ring(stand_ins, self.net)[self.rank]).reshape(own.shape)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        return [summed if r == self.rank else summed.copy() for r in range(self.n_ranks)]


class LocalGroup:
    """``n_ranks`` simulated ranks in this process: ``all_reduce(buffers)`` gives every rank the sum of the
    buffers (lesson 07's ring, through lesson 08's tensor interface). Where to try ``average_gradients`` out."""

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks, self.calls = check_int("n_ranks", n_ranks, low=1, high=4096), 0

    def all_reduce(self, buffers):
        if len(buffers) != self.n_ranks:
            raise ValueError(f"all_reduce takes one buffer per rank ({self.n_ranks}); got {len(buffers)}")
        self.calls += 1
        return tensor_comm.all_reduce([np.array(b, copy=True) for b in buffers])


def average_gradients(rank_grads, rank_tokens, group):
    """The gradient of the global batch's mean loss on every rank: Σ_r n_r·g_r / Σ_r n_r, in one all-reduce.

    ``rank_grads[r]``: dict name -> array, the gradient of rank r's mean loss over its ``rank_tokens[r]`` tokens.
    Each rank packs n_r·g_r into one flat buffer (in the dict's order), ``group.all_reduce`` sums the buffers, and
    each rank unpacks the sum divided by N = Σ n_r. Returns one dict per rank, shapes and dtypes as given.
    """
    rank_grads = check_sequence("rank_grads", rank_grads, min_size=1)
    if not all(isinstance(g, dict) and g for g in rank_grads):
        raise TypeError("rank_grads must hold one non-empty dict of gradients (name -> array) per rank")
    rank_tokens = check_sequence("rank_tokens", rank_tokens, min_size=len(rank_grads), max_size=len(rank_grads))
    for n in rank_tokens:
        check_int("rank_tokens", n, low=1)
    if not callable(getattr(group, "all_reduce", None)):
        raise TypeError(f"group must be a group of ranks with all_reduce(buffers); got {type(group).__name__}")
    names = list(rank_grads[0])
    total = sum(int(n) for n in rank_tokens)
    buffers = [np.concatenate([np.asarray(grads[name]).reshape(-1) for name in names]) * int(n)
               for grads, n in zip(rank_grads, rank_tokens, strict=True)]
    summed = group.all_reduce(buffers)
    out = []
    for r, flat in enumerate(summed):
        grads, start = {}, 0
        for name in names:
            shape = np.shape(rank_grads[r][name])
            size = int(np.prod(shape))
            grads[name] = (flat[start:start + size] / total).reshape(shape)
            start += size
        out.append(grads)
    return out
