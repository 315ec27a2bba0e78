"""Checks for the exercises of 08_parallelism."""

from __future__ import annotations

import numpy as np

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import mlp
from mlsys_lab.parallelism.pp import pipeline_bubble_fraction, simulate_schedule
from mlsys_lab.parallelism.timeline import stream_idle_fraction
from mlsys_lab.parallelism.zero import zero_memory_per_gpu


def check_zero_memory(fn) -> None:
    """``fn(n_params, n_gpus, stage)`` -> model-state bytes per GPU, mixed-precision Adam (2+2+12 bytes)."""
    cases = [Case("Ψ=7.5e9, N=64, stage 0", (7.5e9, 64, 0), expected=120e9),
             Case("Ψ=7.5e9, N=64, stage 1", (7.5e9, 64, 1), expected=31.40625e9),
             Case("Ψ=7.5e9, N=64, stage 2", (7.5e9, 64, 2), expected=16.640625e9),
             Case("Ψ=7.5e9, N=64, stage 3", (7.5e9, 64, 3), expected=1.875e9)]
    g = rng()
    for _ in range(12):
        psi, n, stage = float(g.integers(1, 2000)) * 1e8, int(g.integers(1, 2049)), int(g.integers(0, 4))
        cases.append(Case(f"Ψ={psi:.3g}, N={n}, stage {stage}", (psi, n, stage),
                          expected=zero_memory_per_gpu(psi, n, stage)))
    check("zero_memory", fn, cases)


def _smallest_microbatches(n_stages, max_bubble, schedule, n_chunks):
    step = n_stages if schedule == "interleaved" and n_chunks > 1 else 1
    m = step
    while pipeline_bubble_fraction(n_stages, m, schedule, n_chunks) > max_bubble:
        m += step
    return m


def check_microbatches_for_bubble(fn) -> None:
    """``fn(n_stages, max_bubble, schedule, n_chunks)`` -> fewest micro-batches m with bubble ≤ max_bubble.

    For the interleaved schedule m must be a multiple of n_stages. Budget: the answer is run through
    the pipeline simulator, whose *measured* idle fraction must be within the bound; the answer must
    also be the smallest such m (for a fixed batch, more micro-batches means thinner, slower GEMMs).
    """
    def budget(n_stages, max_bubble, schedule, n_chunks):
        def inspect(m):
            idle = stream_idle_fraction(simulate_schedule(n_stages, int(m), schedule, n_chunks))
            if idle > max_bubble + 1e-12:
                return f"with m={m} the simulated pipeline idles {idle:.1%} > {max_bubble:.0%}"
            return None
        return inspect

    cases = [Case("p=4, ≤10%, 1f1b", (4, 0.10, "1f1b", 1), expected=27),
             Case("p=8, ≤10%, interleaved v=4", (8, 0.10, "interleaved", 4), expected=16)]
    g = rng()
    for _ in range(10):
        p = int(g.integers(2, 9))
        bound = float(g.choice([0.055, 0.095, 0.145, 0.195, 0.29]))  # never exactly on a boundary
        schedule = str(g.choice(["gpipe", "1f1b", "interleaved"]))
        v = int(g.integers(2, 5)) if schedule == "interleaved" else 1
        cases.append(Case(f"p={p}, ≤{bound:.0%}, {schedule} v={v}", (p, bound, schedule, v),
                          expected=_smallest_microbatches(p, bound, schedule, v),
                          check_result=budget(p, bound, schedule, v)))
    check("microbatches_for_bubble", fn, cases)


def check_tp_mlp(fn) -> None:
    """``fn(x, w1, w2, n_ranks, log)`` -> list of per-rank outputs of GeLU(x W1) W2, Megatron-style.

    Budget: exactly one ``comm.all_reduce`` (of the (b, s, d) output) and no other collective, so at
    most what a ring sends for x, 2(p−1)/p · x.nbytes per rank (2(p−1) chunks of ⌈x.size/p⌉ elements
    when p does not divide x.size): weights must be partitioned, never gathered.
    """
    g = rng()
    cases = []
    for index in range(8):
        p = int(g.choice([1, 2, 4, 8])) if index else 2
        b, s, d = int(g.integers(1, 4)), int(g.integers(1, 9)), int(g.integers(2, 17))
        f = 8 * int(g.integers(1, 5))
        x = xp.asarray(g.normal(size=(b, s, d)))
        w1, w2 = xp.asarray(g.normal(size=(d, f))), xp.asarray(g.normal(size=(f, d)))
        expected = asnumpy(mlp(x, w1, w2)[0])
        log = comm.CommLog()
        budget_bytes = 2 * (p - 1) * -(-x.size // p) * x.itemsize  # the ring's busiest rank

        def inspect(outs, log=log, p=p, budget_bytes=budget_bytes):
            if log.calls.get("all_reduce", 0) != 1 or set(log.calls) - {"all_reduce"}:
                return f"used collectives {dict(log.calls)}; the budget is one all_reduce"
            if log.total_bytes > budget_bytes + 1e-9:
                return f"sent {log.total_bytes:.0f} bytes per rank > budget {budget_bytes:.0f}"
            return None

        cases.append(Case(f"p={p}, x{(b, s, d)}, f={f}", (x, w1, w2, p, log),
                          expected=[expected] * p, check_result=inspect))

    def compare(got, expected):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(np.allclose(asnumpy(a), e, rtol=1e-9, atol=1e-9)
                        for a, e in zip(got, expected, strict=True)))

    check("tp_mlp", fn, cases, compare=compare)
