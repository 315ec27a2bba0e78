"""The checks of the exercises of 12_capstone: causal attention's backward, and the data-parallel gradient average.

``attention_backward(q, k, v, probs, dy, scale)`` is compared with the chain rule (the course's
:func:`mlsys_lab.capstone.operators.attention_vjp`, itself checked against central differences in the tests) to
float64 round-off, on causal attention of random shapes down to one position and one feature, one head and many.

``average_gradients(rank_grads, rank_tokens, group)`` gets every rank's gradient (a dict of arrays: the gradient of
that rank's mean loss over its ``rank_tokens[r]`` tokens) and a group of simulated ranks, and returns on every rank
the gradient of the global batch's mean loss, Σ_r n_r·g_r / Σ_r n_r. The check runs each case twice over:

* as given, on a group that stays on the checking side and records the all-reduces: the values (each rank's
  dict, shapes and dtypes as given), and the budget of DDP's single bucket: exactly one ``group.all_reduce``, of
  one flat buffer per rank, holding at most the gradient's bytes in its own dtype plus one value;
* once per rank r as the capstone's MPI run calls it: only rank r's gradient is there (the others are NaN), and
  the group sums rank r's buffer with the other ranks' buffers of the first run, as real ranks would send them.
  Rank r's result must not change: a rank may use only its own gradient, the token counts, and what the
  all-reduce returns. That is what lets the same function run on real MPI ranks.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from mlsys_lab.capstone.dp import LocalGroup
from mlsys_lab.capstone.operators import attention_vjp, causal_probs
from mlsys_lab.exercises import Case, check, rng, short
from mlsys_lab.parallelism import comm as tensor_comm


class _RecordingGroup(LocalGroup):
    """A :class:`LocalGroup` that keeps the buffers of every all-reduce (copies, as the learner passed them)."""

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({"all_reduce", "n_ranks"})

    def __init__(self, n_ranks: int) -> None:
        super().__init__(n_ranks)
        self.buffers: list[list[np.ndarray]] = []

    def all_reduce(self, buffers):
        self.buffers.append([np.array(b, copy=True) for b in buffers])
        return super().all_reduce(buffers)


class _OneRankGroup(_RecordingGroup):
    """Rank ``rank``'s view of the group on real ranks: its own buffer, summed with what the other ranks sent
    in the first run (``others``); the learner's entries for the other ranks are never read."""

    def __init__(self, n_ranks: int, rank: int, others: list[np.ndarray]) -> None:
        super().__init__(n_ranks)
        self.rank, self.others = rank, others

    def all_reduce(self, buffers):
        if len(buffers) != self.n_ranks:
            raise ValueError(f"all_reduce takes one buffer per rank ({self.n_ranks}); got {len(buffers)}")
        mine = np.array(buffers[self.rank], copy=True)
        if mine.shape != self.others[self.rank].shape:
            raise ValueError(f"rank {self.rank}'s buffer has shape {mine.shape} here but "
                             f"{self.others[self.rank].shape} when every rank's gradient was there")
        self.buffers.append([mine])
        return tensor_comm.all_reduce([mine if r == self.rank else b.astype(mine.dtype)
                                       for r, b in enumerate(self.others)])


def reference_average_gradients(rank_grads, rank_tokens, group):
    """Σ_r n_r·g_r / Σ_r n_r on every rank, with one all-reduce of one flat buffer per rank."""
    names = list(rank_grads[0])
    total = sum(int(n) for n in rank_tokens)
    buffers = [np.concatenate([np.asarray(g[name]).reshape(-1) for name in names]) * int(n)
               for g, n in zip(rank_grads, rank_tokens, strict=True)]
    out = []
    for r, flat in enumerate(group.all_reduce(buffers)):
        grads, start = {}, 0
        for name in names:
            shape = np.shape(rank_grads[r][name])
            grads[name] = (flat[start:start + int(np.prod(shape))] / total).reshape(shape)
            start += int(np.prod(shape))
        out.append(grads)
    return out


def _expected(rank_grads, rank_tokens) -> dict[str, np.ndarray]:
    total = sum(rank_tokens)
    return {name: sum(n * np.asarray(g[name], dtype=np.float64) for g, n in zip(rank_grads, rank_tokens,
                                                                                strict=True)) / total
            for name in rank_grads[0]}


def _values_problem(got, rank_grads, rank_tokens, ranks) -> str | None:
    p, expected = len(rank_grads), _expected(rank_grads, rank_tokens)
    if not isinstance(got, (list, tuple)) or len(got) != p:
        return f"return one dict per rank ({p}); got {short(got)}"
    for r in ranks:
        grads = got[r]
        if not isinstance(grads, dict) or set(grads) != set(expected):
            return f"rank {r}: return a dict with the gradients' names {sorted(expected)}; got {short(grads)}"
        for name, want in expected.items():
            given = np.asarray(rank_grads[r][name])
            value = np.asarray(grads[name])
            if value.shape != given.shape or value.dtype != given.dtype:
                return (f"rank {r}, {name!r}: got shape {value.shape} {value.dtype}; the gradient is "
                        f"{given.shape} {given.dtype}: keep both")
            scale = max(abs(n) * float(np.abs(np.asarray(g[name], dtype=float)).max(initial=0.0))
                        for g, n in zip(rank_grads, rank_tokens, strict=True)) / sum(rank_tokens)
            rtol = 1e-5 if given.dtype == np.float32 else 1e-10
            if not np.allclose(value.astype(float), want, rtol=rtol, atol=rtol * scale + 1e-300):
                return (f"rank {r}, {name!r}: got {short(value)}, expected Σ n_r·g_r / Σ n_r = "
                        f"{short(want.astype(given.dtype))} (tokens {list(rank_tokens)})")
    return None


def _budget_problem(group: _RecordingGroup, rank_grads) -> str | None:
    calls = group.buffers
    if len(calls) != 1:
        return (f"called group.all_reduce {len(calls)} times; the budget is one call with one flat buffer per rank "
                "(every gradient in one bucket)")
    n_bytes = sum(np.asarray(a).nbytes for a in rank_grads[0].values())
    itemsize = np.asarray(next(iter(rank_grads[0].values()))).itemsize
    for r, buffer in enumerate(calls[0]):
        if buffer.ndim != 1:
            return f"rank {r} all-reduced an array of shape {buffer.shape}; pack the gradients into one flat buffer"
        if buffer.nbytes > n_bytes + itemsize:
            return (f"rank {r} all-reduced {buffer.nbytes} bytes ({buffer.size} × {buffer.dtype}); its gradients "
                    f"hold {n_bytes} bytes: send them in their own dtype, at most one value more")
    return None


def _hidden(rank_grads, rank: int):
    return [{k: np.array(v, copy=True) if s == rank else np.full_like(v, np.nan) for k, v in g.items()}
            for s, g in enumerate(rank_grads)]


def _run_average(fn: Callable, rank_grads, rank_tokens) -> str:
    """'ok', or what is wrong: values, budget, then each rank alone with the others' gradients hidden."""
    p = len(rank_grads)
    group = _RecordingGroup(p)
    got = fn([{k: np.array(v, copy=True) for k, v in g.items()} for g in rank_grads], list(rank_tokens), group)
    problem = _values_problem(got, rank_grads, rank_tokens, range(p)) or _budget_problem(group, rank_grads)
    if problem:
        return problem
    for r in range(p):
        alone = _OneRankGroup(p, r, group.buffers[0])
        problem = _values_problem(fn(_hidden(rank_grads, r), list(rank_tokens), alone), rank_grads, rank_tokens,
                                  [r])
        if not problem and len(alone.buffers) != 1:
            problem = f"called group.all_reduce {len(alone.buffers)} times; the budget is one call"
        if problem:
            return (f"as on real ranks, rank {r} alone (the other ranks' gradients NaN, the all-reduce summing its "
                    f"buffer with theirs): {problem}")
    return "ok"


def _gradients(g: np.random.Generator, names: list[str], p: int, dtype: str) -> list[dict]:
    shapes = {name: tuple(int(s) for s in g.integers(1, 5, size=int(g.integers(1, 4)))) for name in names}
    return [{name: g.normal(size=shape).astype(dtype) for name, shape in shapes.items()} for _ in range(p)]


def _case(label: str, fn: Callable, rank_grads, rank_tokens) -> Case:
    return Case(label, (fn, rank_grads, rank_tokens), expected="ok",
                check_result=lambda got: None if got == "ok" else str(got))


def check_average_gradients(fn: Callable) -> None:
    """``fn(rank_grads, rank_tokens, group)`` -> one dict per rank: Σ_r n_r·g_r / Σ_r n_r, from one all-reduce of one
    flat buffer per rank, each rank using only its own gradient, the counts, and what the all-reduce returned."""
    g = rng()
    example = [{"w": np.array([1.0, 2.0]), "b": np.array([0.5])}, {"w": np.array([4.0, 8.0]), "b": np.array([-1.5])}]
    unsorted = ["wte", "b", "attn.w"]  # dict order is not sorted order
    cases = [
        _case("the example: p=2, tokens [3, 1]", fn, example, [3, 1]),
        _case("p=3, tokens [512, 512, 448], float32", fn, _gradients(g, unsorted, 3, "float32"), [512, 512, 448]),
        _case("p=1", fn, _gradients(g, ["w", "b"], 1, "float64"), [7]),
        _case("p=4, tokens [1, 2, 3, 10], float64", fn, _gradients(g, ["z", "a", "m"], 4, "float64"), [1, 2, 3, 10]),
        _case("p=8, one token on rank 7, float32", fn, _gradients(g, unsorted, 8, "float32"), [64] * 7 + [1]),
    ]
    for _ in range(5):
        p = int(g.integers(2, 9))
        names = [str(n) for n in g.permutation(["wte", "wpe", "h0.attn.w", "h0.fc.b", "lnf.g", "head.w"])[
            :int(g.integers(2, 6))]]
        dtype = str(g.choice(["float32", "float64"]))
        tokens = [int(t) for t in g.integers(1, 200, size=p)]
        cases.append(_case(f"p={p}, tokens {tokens}, {dtype}", fn, _gradients(g, names, p, dtype), tokens))
    check("average_gradients", _run_average, cases, compare=lambda got, expected: True, learner=fn)


# --- exercise 1: the backward of causal attention ----------------------------------------------------------
def reference_attention_backward(q, k, v, probs, dy, scale):
    """(dq, dk, dv) of y = P·v with P = softmax(scale · q·kᵀ) under the causal mask."""
    return attention_vjp(q, k, v, probs, dy, scale)


def _attention_case(label: str, g: np.random.Generator, b: int, h: int, t: int, d: int, spread: float = 1.0) -> Case:
    q, k, v, dy = (g.normal(scale=spread if i < 2 else 1.0, size=(b, h, t, d)) for i in range(4))
    scale = 1.0 / np.sqrt(d)
    probs = causal_probs(q, k, scale)
    expected = reference_attention_backward(q, k, v, probs, dy, scale)
    return Case(label, (q, k, v, probs, dy, scale), expected="(dq, dk, dv)",
                check_result=lambda got, expected=expected: _gradients_problem(got, expected))


def _gradients_problem(got, expected) -> str | None:
    """None when ``got`` is (dq, dk, dv) equal to ``expected`` to round-off; else which one is wrong, and how."""
    if not isinstance(got, (list, tuple)) or len(got) != 3:
        return f"return a tuple (dq, dk, dv); got {short(got)}"
    for name, value, want in zip(("dq", "dk", "dv"), got, expected, strict=True):
        value = np.asarray(value)
        if value.shape != want.shape or value.dtype.kind != "f":
            return f"{name} has shape {value.shape} and dtype {value.dtype}; expected {want.shape} float"
        scale = max(1.0, float(np.abs(want).max(initial=0.0)))
        if not np.allclose(value, want, rtol=1e-9, atol=1e-12 * scale):
            where = np.unravel_index(int(np.argmax(np.abs(value - want))), want.shape)
            return (f"{name} is off by up to {float(np.abs(value - want).max()):.3g} (at index "
                    f"{tuple(map(int, where))}: got {float(value[where]):.6g}, expected {float(want[where]):.6g})")
    return None


def check_attention_backward(fn: Callable) -> None:
    """``fn(q, k, v, probs, dy, scale)`` -> (dq, dk, dv), each (B, H, T, D), the VJP of causal softmax attention."""
    g = rng()
    cases = [
        _attention_case("the example's shape: B=1, H=1, T=2, D=1", g, 1, 1, 2, 1),
        _attention_case("T=1 (each position sees only itself)", g, 2, 2, 1, 3),
        _attention_case("B=2, H=4, T=5, D=2", g, 2, 4, 5, 2),
        _attention_case("peaked softmax (large scores), T=6", g, 1, 2, 6, 4, spread=4.0),
        _attention_case("D=1, T=7", g, 1, 1, 7, 1),
    ]
    for _ in range(5):
        b, h, t, d = (int(g.integers(1, high)) for high in (4, 5, 10, 9))
        cases.append(_attention_case(f"B={b}, H={h}, T={t}, D={d}", g, b, h, t, d))
    check("attention_backward", fn, cases, compare=lambda got, expected: True)  # judged in check_result
