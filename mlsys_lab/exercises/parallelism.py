"""Checks for the exercises of 08_parallelism.

Every check runs the learner's function and judges what it *did*: the ZeRO high-water mark against a
layer-by-layer walk of the step, the micro-batch count through the pipeline simulator, the tensor-parallel
MLP through a group of simulated ranks that records every collective call (it stays on the checking
side, so what it saw is not a number the learner's code reports), the 1F1B op lists by running them.
The FSDP step (:mod:`~mlsys_lab.exercises.parallelism_fsdp`: gathered memory and bytes measured by a sharded
group) and DDP's bucket schedule (:mod:`~mlsys_lab.exercises.parallelism_ddp`: run on one communication stream)
live in modules of their own and are re-exported here.
"""

from __future__ import annotations

from functools import lru_cache
from typing import ClassVar

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.nn import gelu
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.pp import Op, pipeline_bubble_fraction, simulate_ops, simulate_schedule, stashed_peak
from mlsys_lab.parallelism.timeline import stream_idle_fraction

# ---------------------------------------------------------------- 6.1 ZeRO's high-water mark


def reference_zero_peak(layer_sizes: list[int], n_gpus: int, stage: int) -> int:
    """Peak model-state bytes on one rank during a mixed-precision Adam step (2 + 2 + 12 bytes per parameter).

    Each layer's flat buffer is padded to a multiple of N and cut into N shards of ⌈Ψ_i/N⌉ elements
    (FSDP's flat parameter). What a stage shards is held as shards; the rest in full. Stage ≥ 2 briefly
    holds one layer's full gradient before its reduce-scatter, and stage 3 one layer's gathered weights
    (both at once, in the backward of the largest layer): (N−1)·⌈Ψ_i/N⌉ elements each beyond the own shard.
    """
    shards = [-(-int(s) // n_gpus) for s in layer_sizes]
    full, own = sum(int(s) for s in layer_sizes), sum(shards)
    weights = 2 * (own if stage >= 3 else full)
    grads = 2 * (own if stage >= 2 else full)
    optimizer = 12 * (own if stage >= 1 else full)
    extra = (n_gpus - 1) * max(shards)
    transient = 2 * extra * ((stage >= 2) + (stage >= 3))
    return weights + grads + optimizer + transient


def check_zero_memory(fn) -> None:
    """``fn(layer_sizes, n_gpus, stage)`` -> peak model-state bytes per rank (int), per :func:`reference_zero_peak`."""
    cases = [Case("layers [10, 6], N=4, stage 3", ([10, 6], 4, 3), expected=116),
             Case("layers [10, 6], N=4, stage 0", ([10, 6], 4, 0), expected=256),
             Case("one GPU, stage 3 (nothing to shard)", ([7, 5, 3], 1, 3), expected=240),
             Case("largest layer first, N=3, stage 2", ([20, 4, 5], 3, 2), expected=240),
             Case("largest layer first, N=3, stage 3", ([20, 4, 5], 3, 3), expected=232),
             Case("sizes divisible by N, stage 1", ([8, 16], 8, 1), expected=132)]
    g = rng()
    for stage in (0, 1, 2, 3, 1, 2, 3, 3):
        n = int(g.integers(2, 17))
        sizes = [int(s) for s in g.integers(1, 5000, size=int(g.integers(2, 7)))]
        sizes[int(g.integers(0, len(sizes) - 1))] += 5000                     # the largest is never last
        sizes = [s + (s % n == 0) for s in sizes]                              # no size a multiple of N
        cases.append(Case(f"{len(sizes)} layers, N={n}, stage {stage}", (sizes, n, stage),
                          expected=reference_zero_peak(sizes, n, stage)))
    check("zero_memory", fn, cases)


# ---------------------------------------------------------------- 6.2 micro-batches for a bubble bound


def _smallest_microbatches(n_stages, max_bubble, schedule, n_chunks):
    step = n_stages if schedule == "interleaved" and n_chunks > 1 else 1
    m = step
    while pipeline_bubble_fraction(n_stages, m, schedule, n_chunks) > max_bubble:
        m += step
    return m


@lru_cache(maxsize=4096)
def _simulated_idle(n_stages: int, n_microbatches: int, schedule: str, n_chunks: int) -> float:
    """The idle fraction the pipeline simulator measures (remembered: the fixed cases recur on every run)."""
    return stream_idle_fraction(simulate_schedule(n_stages, n_microbatches, schedule, n_chunks))


def check_microbatches_for_bubble(fn) -> None:
    """``fn(n_stages, max_bubble, schedule, n_chunks)`` -> fewest micro-batches m with bubble ≤ max_bubble.

    For the interleaved schedule m must be a multiple of n_stages. Budget: the answer is run through
    the pipeline simulator, whose *measured* idle fraction must be within the bound; the answer must
    also be the smallest such m (for a fixed batch, more micro-batches means thinner, slower GEMMs).
    Fixed cases land exactly on the bound (where a float closed form rounds one too high) and where the
    multiple-of-p rule moves the answer.
    """
    def budget(n_stages, max_bubble, schedule, n_chunks):
        def inspect(m):
            idle = _simulated_idle(n_stages, int(m), schedule, n_chunks)
            if idle > max_bubble + 1e-12:
                return f"with m={m} the simulated pipeline idles {idle:.1%} > {max_bubble:.0%}"
            return None
        return inspect

    fixed = [(4, 0.10, "1f1b", 1), (8, 0.10, "interleaved", 4),
             (4, 0.20, "1f1b", 1), (5, 0.20, "gpipe", 1), (8, 0.125, "1f1b", 1),   # exactly on the bound
             (4, 0.10, "interleaved", 2), (6, 0.05, "interleaved", 3),            # the multiple of p binds
             (1, 0.0, "gpipe", 1), (3, 0.5, "interleaved", 2)]                     # one stage; a loose bound
    g = rng()
    drawn = []
    for _ in range(8):
        p = int(g.integers(2, 9))
        schedule = str(g.choice(["gpipe", "1f1b", "interleaved", "interleaved"]))
        v = int(g.integers(2, 5)) if schedule == "interleaved" else 1
        m_exact = int(g.integers(1, 17)) * (p if schedule == "interleaved" else 1)
        on_bound = g.random() < 0.5                                           # half exactly on a boundary
        bound = pipeline_bubble_fraction(p, m_exact, schedule, v) if on_bound else float(g.uniform(0.06, 0.4))
        drawn.append((p, bound, schedule, v))
    cases = [Case(f"p={p}, ≤{bound:.4g}, {schedule} v={v}", (p, bound, schedule, v),
                  expected=_smallest_microbatches(p, bound, schedule, v),
                  check_result=budget(p, bound, schedule, v))
             for p, bound, schedule, v in fixed + drawn]
    check("microbatches_for_bubble", fn, cases)


# ---------------------------------------------------------------- 6.3 the column/row tensor-parallel MLP


class RecordingGroup:
    """``n_ranks`` simulated ranks whose collectives record what each rank contributed.

    The learner calls ``group.all_reduce(buffers)`` (and may call ``all_gather`` / ``reduce_scatter``);
    each returns the per-rank results of :mod:`mlsys_lab.parallelism.comm`. The check reads ``calls``.
    """

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"all_reduce", "all_gather", "reduce_scatter", "n_ranks"})

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = n_ranks
        self.calls: list[tuple[str, list[np.ndarray]]] = []
        self.log = comm.CommLog()

    def _record(self, name: str, buffers) -> list[np.ndarray]:
        arrays = [np.array(b, dtype=float) for b in buffers]
        self.calls.append((name, arrays))
        return arrays

    def all_reduce(self, buffers) -> list:
        return comm.all_reduce(self._record("all_reduce", buffers), self.log)

    def all_gather(self, shards, axis: int = 0) -> list:
        return comm.all_gather(self._record("all_gather", shards), axis=axis, log=self.log)

    def reduce_scatter(self, buffers, axis: int = 0) -> list:
        return comm.reduce_scatter(self._record("reduce_scatter", buffers), axis=axis, log=self.log)


def _tp_problem(group: RecordingGroup, x, w1, w2) -> str | None:
    """What is wrong with the collectives the learner's MLP called (None: one all-reduce of the shard partials)."""
    names = [name for name, _ in group.calls]
    if names != ["all_reduce"]:
        return f"called {names or 'no collective'}; the budget is exactly one group.all_reduce"
    p = group.n_ranks
    buffers = group.calls[0][1]
    if len(buffers) != p:
        return f"all-reduced {len(buffers)} buffers; one per rank ({p}) is due"
    cols = w1.shape[1] // p
    for r, buffer in enumerate(buffers):
        part = gelu(x @ w1[:, r * cols:(r + 1) * cols]) @ w2[r * cols:(r + 1) * cols, :]
        if buffer.shape != part.shape or not np.allclose(buffer, part, rtol=1e-9, atol=1e-9):
            return (f"rank {r} all-reduced a buffer that is not GeLU(x W1[:, {r * cols}:{(r + 1) * cols}]) · "
                    f"W2[{r * cols}:{(r + 1) * cols}, :]: rank r must compute with its own column / row block only")
    return None


def check_tp_mlp(fn) -> None:
    """``fn(x, w1, w2, n_ranks, group)`` -> list of per-rank (b, s, d) outputs of GeLU(x W1) W2, Megatron-style.

    Rank r holds columns r·f/p … (r+1)·f/p of W1 and the same rows of W2. Budget, read from the group:
    exactly one ``group.all_reduce``, of the p partial outputs GeLU(x W1_r) W2_r: no weight is gathered and
    no rank computes with another rank's block.
    """
    g = rng()
    sizes = [(1, (1, 1, 2), 8), (2, (1, 3, 4), 8), (4, (2, 2, 4), 8), (8, (1, 1, 3), 8)]   # f/p down to 1
    for _ in range(6):
        p = int(g.choice([2, 4, 8]))
        sizes.append((p, (int(g.integers(1, 4)), int(g.integers(1, 9)), int(g.integers(2, 17))),
                      8 * int(g.integers(1, 5))))
    cases = []
    for p, (b, s, d), f in sizes:
        x = g.normal(size=(b, s, d))
        w1, w2 = g.normal(size=(d, f)), g.normal(size=(f, d))
        group = RecordingGroup(p)
        expected = gelu(x @ w1) @ w2
        cases.append(Case(f"p={p}, x{(b, s, d)}, f={f}", (x, w1, w2, p, group), expected=[expected] * p,
                          check_result=lambda outs, group=group, x=x, w1=w1, w2=w2: _tp_problem(group, x, w1, w2)))

    def compare(got, expected):
        return (isinstance(got, (list, tuple)) and len(got) == len(expected)
                and all(np.shape(a) == e.shape and np.allclose(np.asarray(a, dtype=float), e, rtol=1e-9, atol=1e-9)
                        for a, e in zip(got, expected, strict=True)))

    check("tp_mlp", fn, cases, compare=compare)


# ---------------------------------------------------------------- 6.4 a 1F1B schedule


def _as_orders(got, p: int, m: int) -> tuple[list[list[Op]] | None, str | None]:
    """The learner's op lists as :class:`Op` lists, or what is malformed about them."""
    if not isinstance(got, (list, tuple)) or len(got) != p:
        return None, f"return one op list per stage ({p} lists); got {type(got).__name__}"
    orders = []
    for d, ops in enumerate(got):
        try:
            parsed = [Op(str(kind), int(mb)) for kind, mb in ops]
        except (TypeError, ValueError):
            return None, f"stage {d}: every op must be a pair ('F' or 'B', micro-batch)"
        want = sorted([("B", i) for i in range(m)] + [("F", i) for i in range(m)])
        if sorted((op.kind, op.microbatch) for op in parsed) != want:
            return None, f"stage {d} must run F i and B i exactly once for every micro-batch i < {m}"
        orders.append(parsed)
    return orders, None


def _schedule_problem(got, p: int, m: int) -> str | None:
    orders, problem = _as_orders(got, p, m)
    if problem:
        return problem
    try:
        events = simulate_ops(orders)
    except RuntimeError as exc:
        return str(exc)
    makespan = max(e.end for e in events)
    best = (m + p - 1) * 3.0                                    # t_f = 1, t_b = 2: 1F1B's (and GPipe's) time
    if makespan > best + 1e-9:
        return f"the step takes {makespan:g} (t_f = 1, t_b = 2); 1F1B takes (m + p − 1)·3 = {best:g}"
    for d, ops in enumerate(orders):
        if stashed_peak(ops) > min(p - d, m):
            return (f"stage {d} holds {stashed_peak(ops)} micro-batches at once; "
                    f"1F1B holds min(p − d, m) = {min(p - d, m)}")
    return None


def check_one_f_one_b(fn) -> None:
    """``fn(n_stages, n_microbatches)`` -> per stage, its ordered list of ("F", i) / ("B", i) ops.

    The op lists are run by the pipeline simulator (t_f = 1, t_b = 2): no deadlock, each op once, the step
    as short as GPipe's, (m + p − 1)·3, and stage d never holding more than min(p − d, m) micro-batches.
    """
    g = rng()
    shapes = [(4, 8), (1, 1), (1, 5), (4, 1), (8, 3), (3, 3), (2, 16)]
    shapes += [(int(g.integers(2, 9)), int(g.integers(1, 17))) for _ in range(7)]
    cases = [Case(f"p={p}, m={m}", (p, m), check_result=lambda got, p=p, m=m: _schedule_problem(got, p, m))
             for p, m in shapes]
    check("one_f_one_b", fn, cases, compare=lambda got, expected: True)


# ---------------------------------------------------------------- 6.5 an FSDP step, 6.6 DDP's buckets (own modules)
from mlsys_lab.exercises.parallelism_ddp import check_ddp_schedule  # noqa: E402, F401
from mlsys_lab.exercises.parallelism_fsdp import check_fsdp_step  # noqa: E402, F401
