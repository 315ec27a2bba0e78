"""ZeRO-1 on the capstone's MPI ranks: Adam's m and v sharded, a reduce-scatter and an all-gather instead of one
all-reduce.

ZeRO stage 1 (Rajbhandari et al., SC 2020) keeps the optimizer state of 1/p of the parameters on each of p ranks.
A step: every rank scales its flat gradient by its token count n_r; a **reduce-scatter** leaves rank r with the sum of
its own slice only (the slices are ``np.array_split``'s); the rank divides by N, takes Adam's step on its slice of θ
with its slice of m and v, and an **all-gather** puts the updated slices back together on every rank. A
reduce-scatter plus an all-gather move the bytes of one all-reduce (lesson 08), so the traffic is DDP's, while the
Adam state per rank falls from 2·n to 2·n/p values. The sums are MPI's own ``Reduce_scatter`` (its summation order
is not the ring's, so θ agrees with the data-parallel run to round-off, not bit for bit).
"""

from __future__ import annotations

import numpy as np

from mlsys_lab.capstone.train import TrainState, adam_update
from mlsys_lab.validation import check_array, check_int


def slice_sizes(n_params: int, n_ranks: int) -> list[int]:
    """How many of ``n_params`` parameters each of ``n_ranks`` ranks steps: ``np.array_split``'s slices, the first
    n mod p ranks one parameter more (so the paper's Ψ/N_d is exact only when p divides Ψ)."""
    n, p = check_int("n_params", n_params, low=1), check_int("n_ranks", n_ranks, low=1, high=1 << 20)
    return [n // p + (1 if r < n % p else 0) for r in range(p)]


class Zero1Optimizer:
    """Adam over this rank's slice of θ (a view: stepping it updates θ), with m and v of the slice's size only.

    ``m`` and ``v``: this rank's slices of the moments to start from (a resumed run's shard), else zeros."""

    def __init__(self, comm, theta: np.ndarray, lr: float, step: int = 0, m: np.ndarray | None = None,
                 v: np.ndarray | None = None) -> None:
        from mpi4py import MPI

        self.comm, self.theta, self.lr = comm, theta, lr
        p, r = comm.Get_size(), comm.Get_rank()
        sizes = np.array(slice_sizes(theta.size, p))
        self.counts, self.displs = sizes.tolist(), np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
        lo, hi = self.displs[r], self.displs[r] + self.counts[r]
        m, v = ((np.zeros(hi - lo, theta.dtype) if a is None else check_array(name, a, shape=(hi - lo,)).astype(
            theta.dtype)) for name, a in (("m", m), ("v", v)))
        self.shard = TrainState(theta[lo:hi], m, v, step)
        self.mpi_type = MPI.FLOAT if theta.dtype == np.float32 else MPI.DOUBLE
        self.sum = MPI.SUM

    @property
    def state_bytes(self) -> int:
        """Bytes of Adam state this rank holds: m and v of its slice."""
        return int(self.shard.m.nbytes + self.shard.v.nbytes)

    def step(self, grad: np.ndarray, n_own: int, n_total: int) -> None:
        """One step from this rank's gradient of its mean loss over ``n_own`` of the ``n_total`` tokens."""
        weighted = np.ascontiguousarray(grad * n_own)
        mine = np.empty(self.counts[self.comm.Get_rank()], dtype=self.theta.dtype)
        self.comm.Reduce_scatter(weighted, mine, recvcounts=self.counts, op=self.sum)
        mine /= n_total
        adam_update(self.shard, mine, self.lr)
        self.shard.step += 1
        self.comm.Allgatherv(self.shard.theta.copy(), [self.theta, self.counts, self.displs, self.mpi_type])
