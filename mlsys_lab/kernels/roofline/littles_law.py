"""Launchers for the Little's-law microbenchmarks in ``roofline/littles_law.cu``.

Little's law, n = R x t: to sustain a throughput R with operations of latency t, n = R t of them
must be in flight at every moment. These kernels measure t (one dependent chain) and R for a
chosen amount of concurrency (threads x independent chains), for HBM loads, FP32 FMAs and
tensor-core MMAs. :mod:`mlsys_lab.roofline.model` holds the formula; these hold the measurements.
"""

from __future__ import annotations

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_int, check_number

SOURCE = "roofline/littles_law.cu"
MMA_FLOP = 2 * 16 * 8 * 16  # one mma.sync m16n8k16


def chase_order(n_elements: int, seed: int = 0) -> np.ndarray:
    """next[] for one random cycle through all ``n_elements`` slots: next[order[i]] = order[i + 1]."""
    check_int("n_elements", n_elements, low=2, high=2**31)
    order = np.random.default_rng(check_int("seed", seed, low=0)).permutation(n_elements).astype(np.uint32)
    nxt = np.empty(n_elements, dtype=np.uint32)
    nxt[order] = np.roll(order, -1)
    return nxt


def chase_reference(nxt: np.ndarray, steps: int, start: int = 0) -> int:
    """Where ``steps`` hops from ``start`` end, following ``nxt`` on the CPU."""
    nxt = check_array("nxt", nxt, ndim=1, kinds="iu")
    if nxt.min() < 0 or nxt.max() >= nxt.size:
        raise ValueError(f"nxt must hold indices into itself, in [0, {nxt.size - 1}]")
    check_int("steps", steps, low=0, high=10**6)  # Python hops on the CPU: a million take about a second
    j = check_int("start", start, low=0, high=nxt.size - 1)
    for _ in range(steps):
        j = int(nxt[j])
    return j


def pointer_chase(next_device, steps: int, start: int = 0) -> tuple[int, int]:
    """Run one thread for ``steps`` dependent loads from ``start``; returns (final index, clock64 cycles).

    A fresh ``start`` walks a path no earlier run touched (its lines are not in L2): HBM latency.
    """
    loader.require_gpu("pointer_chase")
    xp = backend.xp
    check_int("steps", steps, low=1)
    out = xp.zeros(1, dtype=xp.uint32)
    cycles = xp.zeros(1, dtype=xp.int64)
    check_int("start", start, low=0, high=next_device.size - 1)
    args = (next_device, out, np.int32(steps), np.uint32(start), cycles)
    loader.kernel(SOURCE, "pointer_chase")((1,), (1,), args)
    return int(out[0]), int(cycles[0])


def read_inflight(x, blocks: int, threads: int, chains: int = 1):
    """Sweep ``x`` (float32) with ``blocks x threads`` threads, ``chains`` 16-byte loads each in flight.

    Returns the per-thread partial sums (their total equals ``x.sum()`` when every element is visited,
    which :func:`inflight_covers` tells).
    """
    loader.require_gpu("read_inflight")
    xp = backend.xp
    check_int("blocks", blocks, low=1)
    check_int("threads", threads, low=32, high=1024)
    check_int("chains", chains, low=1, high=16)
    out = xp.empty(blocks * threads, dtype=xp.float32)
    fn = loader.kernel(SOURCE, "read_inflight", {"CHAINS": chains})
    fn((blocks,), (threads,), (x, out, np.int64(x.size // 4)))
    return out


def inflight_covers(n4: int, blocks: int, threads: int, chains: int) -> bool:
    """Whether :func:`read_inflight` visits every float4: true when n4 is a multiple of the sweep width."""
    for label, value in (("blocks", blocks), ("threads", threads), ("chains", chains)):
        check_int(label, value, low=1)
    return check_int("n4", n4, low=0) % (blocks * threads * chains) == 0


def ffma_chains(blocks: int, threads: int, chains: int, iters: int, m: float = 0.999, c: float = 0.001):
    """``chains`` independent FMA chains of length ``iters`` per thread; returns (sums, cycles per block)."""
    loader.require_gpu("ffma_chains")
    xp = backend.xp
    check_int("iters", iters, low=1)
    check_number("m", m)
    out = xp.empty(blocks * threads, dtype=xp.float32)
    cycles = xp.zeros(blocks, dtype=xp.int64)
    fn = loader.kernel(SOURCE, "ffma_chains", {"CHAINS": check_int("chains", chains, low=1, high=32)})
    fn((blocks,), (threads,), (out, np.int32(iters), np.float32(m), np.float32(c), cycles))
    return out, cycles


def ffma_reference(chains: int, iters: int, m: float = 0.999, c: float = 0.001) -> np.float32:
    """Sum over k < chains of the chain a <- fma(a, m, c) started at k, in float32 (fma rounded once)."""
    check_int("chains", chains, low=1, high=64)
    check_int("iters", iters, low=0, high=10**6)
    check_number("m", m, low=-1.0, high=1.0)  # |m| <= 1 keeps the chain from overflowing float32
    check_number("c", c, low=-1.0, high=1.0)
    a = np.arange(chains, dtype=np.float64)
    for _ in range(iters):  # float64 then round: what fmaf computes (one rounding per step)
        a = (a * np.float32(m) + np.float32(c)).astype(np.float32).astype(np.float64)
    return np.float32(a.astype(np.float32).sum(dtype=np.float32))


def mma_chains(blocks: int, warps: int, chains: int, iters: int):
    """``chains`` independent tensor-core MMA chains per warp; returns (sums, cycles per block).

    The sums equal the start values (``4 * sum(range(chains))``) since the A operand is zero.
    """
    loader.require_gpu("mma_chains")
    xp = backend.xp
    check_int("iters", iters, low=1)
    threads = 32 * check_int("warps", warps, low=1, high=32)
    out = xp.empty(blocks * threads, dtype=xp.float32)
    cycles = xp.zeros(blocks, dtype=xp.int64)
    fn = loader.kernel(SOURCE, "mma_chains", {"CHAINS": check_int("chains", chains, low=1, high=16)})
    fn((blocks,), (threads,), (out, np.int32(iters), cycles))
    return out, cycles
