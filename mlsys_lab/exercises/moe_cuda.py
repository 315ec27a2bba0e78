"""The CUDA exercises of 11_moe: the token permutation of a MoE layer, scatter and gather, on the GPU.

The router's decision is data, as :func:`mlsys_lab.moe.gating.assign_with_capacity` gives it: ``expert`` and
``slot`` (T, k) int32, slot −1 for a pair dropped at capacity. ``moe_permute_cuda(x, expert, slot, n_experts,
capacity)`` is the learner's launcher of the scatter: buffers (n_experts, capacity, d) float32 with x's row t at
every kept (expert[t, j], slot[t, j]), zeros in the slots nobody fills. ``moe_unpermute_cuda(y, expert, slot,
weight)`` launches the gather: out (T, d) float32, out[t] = Σ_j weight[t, j] · y[expert[t, j], slot[t, j]] over the
kept pairs, zeros for a token with none (the residual carries it). References and the course's kernels:
:mod:`mlsys_lab.kernels.moe.permute`.

The scatter is compared exactly (it moves numbers), the gather within rtol 1e-5, atol 1e-5 of a float64 sum. A
kernel that leaves a slot or a row unwritten is caught whatever its memory held: the cases end with a pair of the
same shapes, the first filling every slot (every token kept), the second leaving most of them empty, so that a
launcher allocating with ``xp.empty`` meets, in the second, a block the first filled with numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_lab.exercises import Case, rng
from mlsys_lab.exercises.cuda_kernels import (
    KernelRace,
    TimedCase,
    check_kernel,
    float32_result,
    launcher,
    speed_point,
)
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.moe.permute import (
    moe_permute,
    moe_permute_bytes,
    moe_permute_reference,
    moe_unpermute,
    moe_unpermute_bytes,
    moe_unpermute_reference,
)
from mlsys_lab.moe.gating import assign_with_capacity, expert_capacity, top_k_experts

RTOL, ATOL = 1e-5, 1e-5  # the gather: k float32 multiply-adds against a float64 sum
# Floors, fractions of the course's kernels' speed. The slow lookalikes: a thread per pair copying its row (the
# scatter), a scatter-add with atomics into a zeroed output (the gather: about 50% on the H200). A gather reading a
# float a thread runs at about 60% of the course's float4 gather on the H200 (too few bytes in flight per thread),
# hence its higher floor; a scatter of a float a thread keeps up with the course's.
PERMUTE_FLOOR = 0.6
UNPERMUTE_FLOOR = 0.7
TIMED = dict(n_tokens=2048, d=4096, n_experts=8, k=2, capacity_factor=1.25)  # Mixtral-like: 8 experts, top-2
EXAMPLE_X = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
EXAMPLE_EXPERT = np.array([[0, 1], [0, 2], [0, 1], [1, 0]], dtype=np.int32)
EXAMPLE_SLOT = np.array([[0, 1], [1, 0], [-1, -1], [0, -1]], dtype=np.int32)  # assign_with_capacity, capacity 2
EXAMPLE_WEIGHT = np.array([[0.75, 0.25], [0.5, 0.5], [0.6, 0.4], [0.9, 0.1]], dtype=np.float32)
# y of the gather's example: expert e scales its buffer by e + 1
EXAMPLE_Y = moe_permute_reference(EXAMPLE_X, EXAMPLE_EXPERT, EXAMPLE_SLOT, 3, 2) * np.float32([1, 2, 3])[:, None, None]
PERMUTE_HINT = ("a correct permutation this slow usually gives each thread a whole row (neighbouring threads then "
                "touch rows d floats apart): give each pair a block, or a warp, whose threads copy neighbouring floats")
UNPERMUTE_HINT = ("a correct gather this slow usually reads a float a thread (read the rows as float4 when d % 4 == 0: "
                  "four times the bytes in flight), adds into the output with atomics, or gives each thread a whole "
                  "row: give each token a block whose threads sum their columns of the k rows in registers")


@dataclass(frozen=True)
class _Timed:
    """The course kernel's result on the timed case, compared in full (the cases compare in ``check_result``,
    which names the first wrong element)."""

    array: np.ndarray


def _comparison(problem):
    def compare(got, expected) -> bool:
        return problem(got, expected.array) is None if isinstance(expected, _Timed) else True
    return compare


def _array_problem(got, expected: np.ndarray, what: str) -> str | None:
    if not isinstance(got, np.ndarray):
        return f"return a {what} float32 array on the GPU; got {type(got).__name__}"
    if got.shape != expected.shape:
        return f"got shape {got.shape}, expected {expected.shape} {what}"
    return float32_result(got)


def permute_problem(got, expected: np.ndarray, sources: np.ndarray | None = None) -> str | None:
    """The first element of the buffers that is not exactly ``expected``'s, named by expert, slot and column.
    ``sources`` (n, C): the token in each slot, −1 for a slot nobody fills."""
    problem = _array_problem(got, expected, "(n_experts, capacity, d)")
    if problem:
        return problem
    wrong = np.argwhere(~(got == expected))
    if not wrong.size:
        return None
    e, s, c = wrong[0]
    text = f"buffers[{e}, {s}, {c}] = {got[e, s, c]:.6g}, expected {expected[e, s, c]:.6g}"
    if sources is not None and sources[e, s] < 0:
        return f"{text}: no pair goes to slot {s} of expert {e}, and a slot nobody fills must be 0"
    return text + (f" (x[{sources[e, s]}, {c}])" if sources is not None else "")


def unpermute_problem(got, expected: np.ndarray, slot: np.ndarray | None = None) -> str | None:
    """The first element of out outside the tolerance, with whether its token has any kept pair."""
    problem = _array_problem(got, expected, "(T, d)")
    if problem:
        return problem
    wrong = np.argwhere(~np.isclose(got, expected, rtol=RTOL, atol=ATOL))
    if not wrong.size:
        return None
    t, c = wrong[0]
    text = f"out[{t}, {c}] = {got[t, c]:.6g}, expected {expected[t, c]:.6g}"
    if slot is not None and not (slot[t] >= 0).any():
        return f"{text}: every pair of token {t} was dropped, so its row is 0"
    return text


# ---------------------------------------------------------------- the routing the cases use
def routing(g, n_tokens: int, n_experts: int, k: int, capacity: int, skew: float = 1.0):
    """(expert, slot) (T, k) int32: the top-k of random logits with uneven experts, slots in the lesson's priority
    order (:func:`assign_with_capacity`), −1 where dropped."""
    logits = g.normal(size=(n_tokens, n_experts)) + skew * g.normal(size=n_experts)
    expert = top_k_experts(logits, k) if n_tokens else np.zeros((0, k), dtype=np.int64)
    _, slot = assign_with_capacity(expert, n_experts, capacity)
    return expert.astype(np.int32), slot.astype(np.int32)


def _gates(g, expert: np.ndarray) -> np.ndarray:
    """Gate weights (T, k) float32: a softmax over k random scores, best first (as top_k_gating gives them)."""
    scores = -np.sort(-g.normal(size=expert.shape), axis=1)
    w = np.exp(scores - scores[:, :1])
    return (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def _filled_then_emptied(n_experts: int, capacity: int):
    """Two routings of T = n · C tokens, k = 1: every slot filled (token t to expert t mod n), then every token to
    expert 0 (its C slots filled, the rest of the tokens dropped, the other experts empty)."""
    t = np.arange(n_experts * capacity)
    full = ((t % n_experts)[:, None].astype(np.int32), (t // n_experts)[:, None].astype(np.int32))
    emptied = (np.zeros((t.size, 1), np.int32), np.where(t < capacity, t, -1)[:, None].astype(np.int32))
    return full, emptied


def _shapes(g) -> list[tuple[str, int, int, int, int, int]]:
    """(label, T, d, n_experts, k, capacity) of the boundaries, random shapes and a large case."""
    shapes = [("no tokens", 0, 8, 4, 2, 3), ("one token", 1, 5, 4, 2, 1), ("k = 1", 37, 64, 4, 1, 12),
              ("k = n_experts", 9, 12, 3, 3, 5), ("capacity 0: every pair dropped", 10, 8, 4, 2, 0),
              ("capacity T: nothing dropped, slots left empty", 20, 16, 5, 2, 20),
              ("d = 37, no multiple of 4", 50, 37, 6, 2, 17), ("d = 1", 64, 1, 8, 2, 16)]
    for _ in range(2):
        n_tokens, d, n_experts = int(g.integers(1, 300)), int(g.integers(1, 300)), int(g.integers(2, 17))
        k = int(g.integers(1, min(4, n_experts) + 1))
        capacity = expert_capacity(n_tokens, n_experts, float(g.uniform(0.5, 2.0)), k)
        shapes.append(("random", n_tokens, d, n_experts, k, capacity))
    shapes.append(("more tokens than a grid sized to the GPU has blocks", 6000, 516, 16, 2,
                   expert_capacity(6000, 16, 1.25, 2)))
    return shapes


def _label(label: str, n_tokens: int, d: int, n_experts: int, k: int, capacity: int) -> str:
    return f"{label}: T={n_tokens}, d={d}, {n_experts} experts, k={k}, capacity {capacity}"


# ---------------------------------------------------------------- the scatter
def _permute_case(label: str, x, expert, slot, n_experts: int, capacity: int) -> Case:
    expected = moe_permute_reference(x, expert, slot, n_experts, capacity)
    sources = np.full((n_experts, capacity), -1)
    t, j = np.nonzero(slot >= 0)
    sources[expert[t, j], slot[t, j]] = t
    return Case(_label(label, x.shape[0], x.shape[1], n_experts, expert.shape[1], capacity),
                (x, expert, slot, n_experts, capacity), expected=expected,
                check_result=lambda got, e=expected, s=sources: permute_problem(got, e, s))


def _tokens(g, n_tokens: int, d: int) -> np.ndarray:
    """x (T, d) float32 with no zero (a zero copied looks like a slot left empty)."""
    x = g.standard_normal((n_tokens, d), dtype=np.float32)
    return np.where(x == 0, np.float32(1), x)


def permute_cases(g) -> list[Case]:
    """The example, the boundaries, random shapes, a large case, then a filled and an emptied routing."""
    cases = [_permute_case("the example", EXAMPLE_X, EXAMPLE_EXPERT, EXAMPLE_SLOT, 3, 2)]
    for label, n_tokens, d, n_experts, k, capacity in _shapes(g):
        cases.append(_permute_case(label, _tokens(g, n_tokens, d), *routing(g, n_tokens, n_experts, k, capacity),
                                   n_experts, capacity))
    full, emptied = _filled_then_emptied(4, 64)
    cases.append(_permute_case("every slot filled", _tokens(g, 256, 20), *full, 4, 64))
    cases.append(_permute_case("the same shapes, experts 1-3 empty", _tokens(g, 256, 20), *emptied, 4, 64))
    return cases


def _timed_routing(g):
    n_tokens, n_experts, k = TIMED["n_tokens"], TIMED["n_experts"], TIMED["k"]
    capacity = expert_capacity(n_tokens, n_experts, TIMED["capacity_factor"], k)
    return (*routing(g, n_tokens, n_experts, k, capacity, skew=0.25), capacity)


def permute_timed(g) -> TimedCase:
    expert, slot, capacity = _timed_routing(g)
    x = g.standard_normal((TIMED["n_tokens"], TIMED["d"]), dtype=np.float32)
    n_experts = TIMED["n_experts"]
    return TimedCase(f"T={TIMED['n_tokens']}, d={TIMED['d']}, {n_experts} experts, top-{TIMED['k']}, capacity "
                     f"{capacity}", (x, expert, slot, n_experts, capacity), moe_permute,
                     moe_permute_bytes(slot, n_experts, capacity, TIMED["d"]), PERMUTE_FLOOR, PERMUTE_HINT,
                     expected_of=_Timed,
                     lookalikes={"a thread per pair copying its whole row (uncoalesced)":
                                 lambda *a: moe_permute(*a, kernel="moe_scatter_thread_per_pair")})


@speed_point
def check_moe_permute_cuda(fn) -> None:
    """``fn(x, expert, slot, n_experts, capacity)`` -> buffers (n_experts, capacity, d) float32 on the GPU: 14
    cases, exact; then timed against the course's kernel (floor 60%)."""
    g = rng()
    check_kernel("moe_permute_cuda", fn, lambda: permute_cases(g), _comparison(permute_problem),
                 lambda: permute_timed(g))


def race_moe_permute_cuda(fn) -> KernelRace:
    """The learner's ``moe_permute_cuda`` timed beside the course's kernel and a copy on this GPU ("see it")."""
    loader.require_gpu("race_moe_permute_cuda")
    return permute_timed(rng()).race(launcher(fn))[0]


# ---------------------------------------------------------------- the gather
def _unpermute_case(label: str, y, expert, slot, weight) -> Case:
    expected = moe_unpermute_reference(y, expert, slot, weight)
    return Case(_label(label, expert.shape[0], y.shape[2], y.shape[0], expert.shape[1], y.shape[1]),
                (y, expert, slot, weight), expected=expected,
                check_result=lambda got, e=expected, s=slot: unpermute_problem(got, e, s))


def unpermute_cases(g) -> list[Case]:
    """The example, the boundaries, random shapes, a large case, then a routing keeping every token and one of
    the same shapes dropping most."""
    cases = [_unpermute_case("the example", EXAMPLE_Y, EXAMPLE_EXPERT, EXAMPLE_SLOT, EXAMPLE_WEIGHT)]
    for label, n_tokens, d, n_experts, k, capacity in _shapes(g):
        expert, slot = routing(g, n_tokens, n_experts, k, capacity)
        y = g.standard_normal((n_experts, capacity, d), dtype=np.float32)
        cases.append(_unpermute_case(label, y, expert, slot, _gates(g, expert)))
    for label, (expert, slot) in zip(("every token kept", "the same shapes, tokens 64-255 dropped"),
                                     _filled_then_emptied(4, 64), strict=True):
        y = _tokens(g, 4 * 64, 20).reshape(4, 64, 20)
        cases.append(_unpermute_case(label, y, expert, slot, g.uniform(0.5, 1.5, size=(256, 1)).astype(np.float32)))
    return cases


def unpermute_timed(g) -> TimedCase:
    expert, slot, capacity = _timed_routing(g)
    y = g.standard_normal((TIMED["n_experts"], capacity, TIMED["d"]), dtype=np.float32)
    return TimedCase(f"T={TIMED['n_tokens']}, d={TIMED['d']}, {TIMED['n_experts']} experts, top-{TIMED['k']}, "
                     f"capacity {capacity}", (y, expert, slot, _gates(g, expert)), moe_unpermute,
                     moe_unpermute_bytes(slot, TIMED["d"]), UNPERMUTE_FLOOR, UNPERMUTE_HINT, expected_of=_Timed,
                     lookalikes={"a scatter-add with atomics into a zeroed output":
                                 lambda *a: moe_unpermute(*a, kernel="moe_gather_atomic")})


@speed_point
def check_moe_unpermute_cuda(fn) -> None:
    """``fn(y, expert, slot, weight)`` -> out (T, d) float32 on the GPU: 14 cases within rtol 1e-5, atol 1e-5 of
    the float64 reference; then timed against the course's kernel (floor 70%)."""
    g = rng()
    check_kernel("moe_unpermute_cuda", fn, lambda: unpermute_cases(g), _comparison(unpermute_problem),
                 lambda: unpermute_timed(g))


def race_moe_unpermute_cuda(fn) -> KernelRace:
    """The learner's ``moe_unpermute_cuda`` timed beside the course's kernel and a copy on this GPU ("see it")."""
    loader.require_gpu("race_moe_unpermute_cuda")
    return unpermute_timed(rng()).race(launcher(fn))[0]
