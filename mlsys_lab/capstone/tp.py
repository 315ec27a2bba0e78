"""Tensor parallelism of every block's MLP (Megatron-LM, Shoeybi et al. 2019, §3), through your ``tp_mlp``.

The block's MLP is  y = gelu(h W1 + b1) W2 + b2,  W1: C×F, W2: F×C (F = 4C). Split W1 by columns and W2 by the
same rows over p ranks: rank r holds W1_r = W1[:, rF/p:(r+1)F/p] and W2_r = W2[rF/p:(r+1)F/p, :]. GeLU acts on
each column alone, so rank r computes gelu(h W1_r + b1_r) W2_r with no communication, and y = Σ_r of those
partials + b2: one all-reduce. The paper names the two conjugate operators that make the split exact:

* **f** before the column-split W1: identity forward (every rank already holds h), **all-reduce backward**: each
  rank's dh_r only accounts for its own columns, dh = Σ_r dh_r.
* **g** after the row-split W2: **all-reduce forward** (the sum above), identity backward (every rank gets dy).

So a block's MLP costs two all-reduces of a (B, T, C) activation per step, one forward (g, inside your
``tp_mlp``) and one backward (f, here). b2 is added once, after g (replicated, like Megatron's bias); b1 goes with
W1's columns: it is folded in as an extra row of W1 against an extra input column of ones, so that ``tp_mlp``
computes gelu([h, 1] [W1; b1]) W2 unchanged.

The backward is the course's, per rank on its own shard (dW1_r, db1_r, dW2_r from rank r's columns and rows
only). ``tp_mlp`` returns outputs, not its activations, so each rank recomputes u_r = h W1_r + b1_r and gelu(u_r)
in the backward: that is *activation recomputation* (Chen et al. 2016; Megatron's selective recomputation), trading
one more matmul per rank for not keeping the (B, T, F/p) activations between the passes. The ranks are simulated in
this process; :class:`TensorParallelGroup` runs lesson 07's ring through lesson 08's :mod:`~mlsys_lab.parallelism.comm`.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mlsys_lab.capstone.model import _gelu_and_grad, course_ops
from mlsys_lab.capstone.train import RunConfig, train
from mlsys_lab.nn import gelu
from mlsys_lab.parallelism import comm
from mlsys_lab.validation import check_array, check_divides, check_int, check_type, max_relative_error

MAX_RANKS = 64  # simulated ranks in one process
# How far the tensor-parallel run may end from the one-process run (max |Δθ| / max |θ|): only summation order
# differs (F split into p partial sums, the bias folded into the matmul). In float32 Adam magnifies it where a
# gradient is zero in exact arithmetic (the key bias: softmax ignores a shift of every score): round-off of about
# 1e-9 there, divided by √v̂ + ε with ε = 1e-8, moves θ by up to ~0.1·lr a step, differently in each run (measured:
# 3e-5 after 6 steps, 9e-5 after 50). In float64 that round-off is ~1e-17 and ε swamps it.
TOLERANCE = {"float64": 1e-12, "float32": 1e-3}


class TensorParallelGroup:
    """``n_ranks`` simulated ranks: ``all_reduce(buffers)`` -> every rank's sum (lesson 07's ring).

    ``log`` (a :class:`~mlsys_lab.parallelism.comm.CommLog`) counts the calls and the bytes the busiest rank sent,
    2(p−1)/p of one buffer per call; ``buffer_bytes`` sums the size of one rank's buffer over the calls.
    """

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = check_int("n_ranks", n_ranks, low=1, high=MAX_RANKS)
        self.log, self.buffer_bytes = comm.CommLog(), 0

    @property
    def calls(self) -> int:
        return self.log.calls["all_reduce"]

    def all_reduce(self, buffers) -> list:
        if not isinstance(buffers, (list, tuple)) or len(buffers) != self.n_ranks:
            raise ValueError(f"buffers must hold one array per rank ({self.n_ranks}); got {type(buffers).__name__} "
                             f"of {len(buffers) if isinstance(buffers, (list, tuple)) else 'no'} items")
        arrays = [np.asarray(b) for b in buffers]
        self.buffer_bytes += arrays[0].nbytes
        return comm.all_reduce(arrays, self.log)


def course_tp_mlp(x, w1, w2, n_ranks: int, group) -> list:
    """The course's ``tp_mlp``: per rank, gelu(x W1_r) W2_r on its own column / row block, then one all-reduce.

    x: (b, s, d_in); w1: (d_in, f); w2: (f, d_out); ``n_ranks`` divides f. Returns ``group.all_reduce`` of the p
    partials: one (b, s, d_out) array per rank, each the whole gelu(x W1) W2 (Megatron's g, forward).
    """
    x = check_array("x", x, ndim=3, kinds="f", finite=True)
    w1 = check_array("w1", w1, ndim=2, kinds="f", finite=True, shape=(x.shape[-1], None))
    w2 = check_array("w2", w2, ndim=2, kinds="f", finite=True, shape=(w1.shape[1], None))
    n_ranks = check_divides("n_ranks", n_ranks, of_name="w1.shape[1]", of_value=w1.shape[1])
    if not callable(getattr(group, "all_reduce", None)):
        raise TypeError(f"group must be a group of ranks with all_reduce(buffers); got {type(group).__name__}")
    if getattr(group, "n_ranks", n_ranks) != n_ranks:
        raise ValueError(f"n_ranks must be the group's number of ranks ({group.n_ranks}); got {n_ranks}")
    k = w1.shape[1] // n_ranks
    partials = [gelu(x @ w1[:, r * k:(r + 1) * k]) @ w2[r * k:(r + 1) * k, :] for r in range(n_ranks)]
    return group.all_reduce(partials)


def _no_adapters(adapters) -> None:
    if adapters is not None:
        raise ValueError("adapters must be None: the tensor-parallel MLP trains W1 and W2 themselves (no LoRA)")


def _agreed_output(outs, calls: int, n_ranks: int, shape: tuple, dtype) -> np.ndarray:
    """Rank 0's output of ``tp_mlp``, once its contract is seen kept: one all-reduce, p outputs that agree."""
    if calls != 1:
        raise ValueError(f"tp_mlp must call group.all_reduce exactly once per MLP (Megatron's g); it called it "
                         f"{calls} times")
    if not isinstance(outs, (list, tuple)) or len(outs) != n_ranks:
        raise ValueError(f"tp_mlp must return one output per rank ({n_ranks}); got {type(outs).__name__}")
    outs = [check_array("tp_mlp's output", o, kinds="f", shape=shape).astype(dtype, copy=False) for o in outs]
    gap = max(max_relative_error(o, outs[0]) for o in outs)
    if gap > 1e3 * np.finfo(dtype).eps:
        raise ValueError(f"tp_mlp's ranks must all end with the same output; they differ by {gap:.1e} (relative): "
                         "is every rank's partial summed?")
    return outs[0]


def _rank_backward(dy, h2, w: dict, g: dict, p: str, cols: slice) -> np.ndarray:
    """Rank r's shard of the backward: fills its columns of fc.w, fc.b and rows of out.w; returns its dh2_r."""
    u = h2 @ w[p + "fc.w"][:, cols] + w[p + "fc.b"][cols]        # recomputed (B, T, F/p): not kept from forward
    a, da_du = _gelu_and_grad(u)
    k = u.shape[-1]
    g[p + "out.w"][cols] = a.reshape(-1, k).T @ dy.reshape(-1, dy.shape[-1])
    du = (dy @ w[p + "out.w"][cols].T) * da_du
    g[p + "fc.w"][:, cols] = h2.reshape(-1, h2.shape[-1]).T @ du.reshape(-1, k)
    g[p + "fc.b"][cols] = du.reshape(-1, k).sum(axis=0)
    return du @ w[p + "fc.w"][:, cols].T


def tensor_parallel_mlp(tp_mlp: Callable, n_ranks: int) -> tuple[Callable, Callable, TensorParallelGroup]:
    """``(mlp, mlp_back, group)`` for :func:`~mlsys_lab.capstone.model.loss_and_grad` (and ``train``): every
    block's MLP split over ``n_ranks`` ranks, forward through ``tp_mlp`` (yours or :func:`course_tp_mlp`),
    backward the course's per shard with one all-reduce of the ranks' dh2 (f's backward). ``group`` counts both."""
    if not callable(tp_mlp):
        raise TypeError(f"tp_mlp must be a function tp_mlp(x, w1, w2, n_ranks, group); got {type(tp_mlp).__name__}")
    group = TensorParallelGroup(n_ranks)

    def mlp(h2, w: dict, p: str, adapters=None):
        _no_adapters(adapters)
        check_divides("n_ranks", n_ranks, of_name=f"{p}fc.w's columns", of_value=w[p + "fc.w"].shape[1])
        x1 = np.concatenate([h2, np.ones((*h2.shape[:-1], 1), dtype=h2.dtype)], axis=-1)      # [h, 1]
        w1 = np.concatenate([w[p + "fc.w"], w[p + "fc.b"][None, :]], axis=0)                # [W1; b1]
        before = group.calls
        outs = tp_mlp(x1, w1, w[p + "out.w"], n_ranks, group)
        y = _agreed_output(outs, group.calls - before, n_ranks, h2.shape, h2.dtype)
        return y + w[p + "out.b"], h2

    def mlp_back(dy, h2, w: dict, g: dict, p: str, adapters=None, tuned=None):
        _no_adapters(adapters)
        k = w[p + "fc.w"].shape[1] // n_ranks
        partials = [_rank_backward(dy, h2, w, g, p, slice(r * k, (r + 1) * k)) for r in range(n_ranks)]
        g[p + "out.b"][...] = dy.reshape(-1, dy.shape[-1]).sum(axis=0)   # b2 is replicated: the same on every rank
        return group.all_reduce(partials)[0]

    return mlp, mlp_back, group


def tensor_parallel_run(config: RunConfig, n_steps: int, n_ranks: int = 2, tp_mlp: Callable | None = None) -> dict:
    """Train ``n_steps`` steps twice from the same start, with every MLP over ``n_ranks`` tensor-parallel ranks
    (``tp_mlp``: yours, or :func:`course_tp_mlp` when None) and on one process; the course's other operators both
    times. Returns both runs' losses and θ, ``theta_gap`` and ``loss_gap`` (max relative differences),
    ``tolerance`` (:data:`TOLERANCE` of the dtype) and ``equal`` (gap within it), and per step:
    ``all_reduces`` (2 per block), ``buffer_bytes`` (one rank's (B, T, C) buffer, summed over them) and
    ``ring_bytes`` (what the busiest rank sent: 2(p−1)/p of ``buffer_bytes``)."""
    check_type("config", config, RunConfig)
    n_steps = check_int("n_steps", n_steps, low=1, high=1000)
    check_int("n_ranks", n_ranks, low=1, high=MAX_RANKS)
    check_divides("n_ranks", n_ranks, of_name="F = 4·d_model", of_value=4 * config.model.d_model)
    mlp, mlp_back, group = tensor_parallel_mlp(course_tp_mlp if tp_mlp is None else tp_mlp, n_ranks)
    parallel, parallel_log = train(config, n_steps, ops=course_ops(), mlp=mlp, mlp_back=mlp_back)
    single, single_log = train(config, n_steps, ops=course_ops())
    theta_gap = max_relative_error(parallel.theta, single.theta)
    tolerance = TOLERANCE[config.model.dtype]
    return {"tp_losses": parallel_log.losses, "single_losses": single_log.losses, "tp_theta": parallel.theta,
            "single_theta": single.theta, "theta_gap": theta_gap, "tolerance": tolerance,
            "loss_gap": max_relative_error(parallel_log.losses, single_log.losses), "equal": theta_gap <= tolerance,
            "all_reduces": group.calls // n_steps, "buffer_bytes": group.buffer_bytes // n_steps,
            "ring_bytes": group.log.bytes_sent["all_reduce"] / n_steps}
