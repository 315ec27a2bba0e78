"""Checks for the exercises of 02_loops."""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict

import numpy as np

from mlsys_lab.exercises import Case, as_python_scalar, check, rng
from mlsys_lab.loops.cache_model import LOOP_ORDERS, matmul_trace, misses_per_iteration
from mlsys_lab.loops.dependence import apply_transformation, is_legal, legal_orders, lexicographically_positive
from mlsys_lab.loops.dependence import parallel_loops as carried_free_loops
from mlsys_lab.loops.matmul import matmul_atb_naive

# The tiled A^T B must beat the naive nest by this factor, the two timed in turn (CPU time). On the course's
# 2-core EPYC (AVX2), quiet or loaded by two busy loops: a vectorized stride-1 nest runs 3.8-8x faster, the same
# nest compiled to scalar code 1.3-2.3x, the naive order against itself 0.9-1.3x, i innermost 0.6-1.0x.
SPEEDUP_REQUIRED = 2.5
SPEED_N = 192  # the size it is timed at: three 288 KiB matrices; the naive nest takes 10-20 ms on that CPU


def _random_dependences(g, depth: int, count: int) -> list[tuple[int, ...]]:
    """``count`` lexicographically positive distance vectors with entries in -2..2."""
    vectors = [v for v in itertools.product(range(-2, 3), repeat=depth) if lexicographically_positive(v)]
    return [vectors[int(i)] for i in g.choice(len(vectors), size=count, replace=False)]


def _same_orders(got, expected) -> bool:
    try:
        return sorted(tuple(int(x) for x in order) for order in got) == sorted(expected)
    except TypeError:
        return False


def check_legal_orders(fn) -> None:
    """``fn(vectors)`` -> every legal loop order (tuples of loop indices, outermost first), any sequence."""
    examples = [
        ("matmul: no carried dependence", [(0, 0, 1)]),
        ("a[i][j] = a[i-1][j+1]", [(1, -1)]),
        ("stencil in place", [(1, 0), (0, 1)]),
        ("DP with diagonal", [(1, 0), (0, 1), (1, 1)]),
        ("3-deep, mixed signs", [(1, -1, 0), (0, 1, -1)]),
        ("3-deep, a rotation is legal, its inverse is not", [(0, 0, 1), (0, 1, -1)]),
        ("one loop", [(1,)]),
        ("4-deep", [(0, 1, 0, -1), (1, 0, -1, 0)]),
    ]
    cases = [Case(label, (vectors,), expected=legal_orders(vectors)) for label, vectors in examples]
    g = rng()
    for _ in range(8):
        depth = int(g.integers(2, 4))
        vectors = _random_dependences(g, depth, int(g.integers(1, 4)))
        cases.append(Case(f"vectors={vectors}", (vectors,), expected=legal_orders(vectors)))
    check("legal_orders", fn, cases, compare=_same_orders)


def check_misses_per_iteration(fn) -> None:
    """``fn(order, elements_per_line)`` -> total cache misses per innermost iteration (CS:APP model)."""
    fixed = [("ijk", 8), ("ikj", 8), ("jki", 4), ("kij", 4), ("jik", 1), ("kji", 32), ("ikj", 16), ("ijk", 2)]
    cases = [Case(f"{order}, {per_line} per line", (order, per_line),
                  expected=misses_per_iteration(order, per_line)["total"]) for order, per_line in fixed]
    g = rng()
    for _ in range(6):
        order = LOOP_ORDERS[int(g.integers(len(LOOP_ORDERS)))]
        per_line = int(g.choice([1, 2, 4, 8, 16, 32, 64]))
        cases.append(Case(f"{order}, {per_line} per line", (order, per_line),
                          expected=misses_per_iteration(order, per_line)["total"]))
    check("misses_per_iteration", fn, cases)


# ------------------------------------------------------------------------- legality of a unimodular transformation
def transformation_answer(vectors, matrix) -> tuple[bool, list[int]]:
    """The reference: (every T d lexicographically positive or zero, loops of the new nest that carry nothing)."""
    transformed = apply_transformation(vectors, matrix)
    return is_legal(transformed), carried_free_loops(transformed)


def _same_verdict(got, expected) -> bool:
    try:
        legal, loops = got
        legal = as_python_scalar(legal)  # np.True_ or a 0-d array is a bool too; 1 is not
        return isinstance(legal, bool) and legal == expected[0] \
            and sorted(int(d) for d in loops) == expected[1]
    except (TypeError, ValueError):
        return False


ELEMENTARY = ("interchange", "reversal", "skew")


def _random_unimodular(g, depth: int) -> np.ndarray:
    """A product of 1-3 elementary transformations: interchange, reversal, skew by -2..2."""
    t = np.eye(depth, dtype=np.int64)
    for _ in range(int(g.integers(1, 4))):
        step = np.eye(depth, dtype=np.int64)
        kind = ELEMENTARY[int(g.integers(3))]
        a, b = (int(x) for x in g.choice(depth, 2, replace=False))
        if kind == "interchange":
            step[[a, b]] = step[[b, a]]
        elif kind == "reversal":
            step[a, a] = -1
        else:
            step[b, a] = int(g.choice([-2, -1, 1, 2]))
        t = step @ t
    return t


def check_transformation_legal(fn) -> None:
    """``fn(vectors, matrix)`` -> ``(legal, parallel)``: is every transformed vector T d lexicographically
    positive (or zero), and which loops of the transformed nest carry no dependence (by depth, outermost 0)."""
    fixed = [
        ("interchange a[i][j] = a[i-1][j+1]", [(1, -1)], [[0, 1], [1, 0]]),
        ("skew j' = i + j, then interchange: the wavefront", [(1, 0), (0, 1), (1, 1)], [[1, 1], [1, 0]]),
        ("reverse the inner loop of a stencil", [(1, 0), (0, 1)], [[1, 0], [0, -1]]),
        ("reverse an inner loop that carries nothing", [(1, -1)], [[1, 0], [0, -1]]),
        ("identity: nothing moves", [(0, 1), (1, -2)], [[1, 0], [0, 1]]),
        ("a loop-independent dependence (0, 0)", [(0, 0), (1, 0)], [[0, 1], [1, 0]]),
        ("skew by -1 makes (1, 1) cross", [(1, 1)], [[1, 0], [-2, 1]]),
        ("3-deep rotation", [(0, 0, 1), (0, 1, -1)], [[0, 1, 0], [0, 0, 1], [1, 0, 0]]),
        ("3-deep, its inverse", [(0, 0, 1), (0, 1, -1)], [[0, 0, 1], [1, 0, 0], [0, 1, 0]]),
    ]
    cases = [Case(label, (vectors, matrix), expected=transformation_answer(vectors, matrix))
             for label, vectors, matrix in fixed]
    g = rng()
    for _ in range(8):
        depth = int(g.integers(2, 4))
        vectors = _random_dependences(g, depth, int(g.integers(1, 4)))
        if g.random() < 0.25:
            vectors.append((0,) * depth)
        matrix = _random_unimodular(g, depth).tolist()
        cases.append(Case(f"vectors={vectors}, T={matrix}", (vectors, matrix),
                          expected=transformation_answer(vectors, matrix)))
    check("transformation_legal", fn, cases, compare=_same_verdict)


# ------------------------------------------------------------------------------- interchange + tiling, timed
TIMING_ROUNDS = (3, 9)  # rounds of (naive nest, learner's nest): at least 3, at most 9 when the ratio is close
# CPU time of this process where the OS keeps it finely (Linux, macOS: ns); wall time where it ticks coarsely.
CLOCK = time.process_time if time.get_clock_info("process_time").resolution <= 1e-6 else time.perf_counter


TIMED_WINDOW_S = 0.02  # after the first round, fn is called often enough per round to run about this long
MAX_REPEAT = 16


def cpu_seconds_of(fn, args: tuple, repeat: int = 1) -> tuple[float, object]:
    """(CPU seconds of ``repeat`` calls ``fn(*args)``, the last call's result).

    In a lesson: this process's :data:`CLOCK`. When grading, ``fn`` is the grader's stand-in for the learner's
    function, which answers with its own ``cpu_seconds_of``: the arguments cross to the learner's kernel once,
    that kernel makes the calls, and the grader reads the kernel's CPU clock from outside (never a number the
    learner's code reports), so the transfer of the arrays is not what is timed.
    """
    if callable(getattr(type(fn), "cpu_seconds_of", None)):
        return fn.cpu_seconds_of(args, repeat)
    start = CLOCK()
    for _ in range(repeat):
        result = fn(*args)
    return max(CLOCK() - start, 1e-9), result


def speedup_over_naive(fn, args: tuple, required: float = SPEEDUP_REQUIRED,
                       rounds: tuple[int, int] = TIMING_ROUNDS) -> tuple[float, object]:
    """(fastest naive nest / fastest ``fn(*args)``, per call, and what the last call of ``fn`` returned).

    Times are CPU seconds (:func:`cpu_seconds_of`): what a nest costs, not how long other programs on a shared
    machine kept it waiting (on a 2-core machine under load, wall-clock ratios of a 2 ms and a 12 ms run
    scatter from 2x to 60x; CPU-time ratios stay within 3.8-9x). The naive nest always runs here, in this
    process (when grading, in the grader: the learner's kernel could slow its own copy down), and ``fn``
    alternately with it on the same arrays, so what slows the machine (caches shared with others, clock speed)
    slows both, and the ratio of the fastest run of each is compared, never a time measured at another moment.
    The first round calls ``fn`` once (it may compile); later rounds call it enough times to run about
    :data:`TIMED_WINDOW_S`. It stops after ``rounds[0]`` rounds when the ratio is clearly above ``required``
    (by 25%) or far below it (half of it: the naive nest itself, a loop order that walks C by column), and
    otherwise runs up to ``rounds[1]``. A nest 10x short of ``required`` (plain Python) stops after 2 rounds.
    """
    a, b, out, _ = args
    naive_out = np.empty_like(out)
    naive_best = fn_best = np.inf
    repeat, result = 1, None
    for done in range(1, rounds[1] + 1):
        start = CLOCK()
        matmul_atb_naive(a, b, naive_out)
        naive_best = min(naive_best, max(CLOCK() - start, 1e-9))
        seconds, result = cpu_seconds_of(fn, args, repeat)
        fn_best = min(fn_best, max(seconds, 1e-9) / repeat)
        repeat = int(min(max(TIMED_WINDOW_S // fn_best, 1), MAX_REPEAT))
        ratio = naive_best / fn_best
        clear = done >= rounds[0] and not 0.5 * required < ratio < 1.25 * required
        if clear or (done >= 2 and ratio < required / 10):
            break
    return ratio, result.copy() if isinstance(result, np.ndarray) else result


def _atb_case(label: str, g, m: int, n: int, p: int, tile: int, a=None, b=None) -> Case:
    a = g.standard_normal((m, n)) if a is None else a
    b = g.standard_normal((m, p)) if b is None else b
    expected = matmul_atb_naive(a, b, np.empty((n, p)))
    out = np.full((n, p), np.nan)  # nothing in out may leak into the result
    return Case(label, (a, b, out, tile), expected=expected, may_change_args=(2,))  # C is written into ``out``


def _bitwise(got, expected) -> bool:
    got = np.asarray(got, dtype=float)
    return got.shape == expected.shape and bool(np.array_equal(got, expected))


def check_atb_tiled(fn) -> None:
    """``fn(a, b, out, tile)`` -> C = A^T B written into ``out`` and returned, bit for bit the increasing-k sum,
    and at least ``SPEEDUP_REQUIRED`` x faster than the naive nest at n = ``SPEED_N`` (timed in turn with it)."""
    g = rng()
    cases = [_atb_case("example: A = arange(6).reshape(3, 2), B = ones((3, 4)), tile 2", g, 3, 2, 4, 2,
                       a=np.arange(6.0).reshape(3, 2), b=np.ones((3, 4))),
             _atb_case("3 x 2 A, 3 x 4 B, tile 2", g, 3, 2, 4, 2),
             _atb_case("tile 1", g, 5, 6, 7, 1),
             _atb_case("tile larger than every dimension", g, 9, 8, 10, 64),
             _atb_case("tiles that do not divide the sizes", g, 37, 29, 41, 8),
             _atb_case("one row of A and B (m = 1)", g, 1, 13, 11, 4),
             _atb_case("a single output", g, 17, 1, 1, 3)]
    for _ in range(4):
        m, n, p = (int(v) for v in g.integers(1, 70, 3))
        tile = int(g.choice([1, 2, 3, 5, 8, 16, 32, 100]))
        cases.append(_atb_case(f"A {m} x {n}, B {m} x {p}, tile {tile}", g, m, n, p, tile))
    speed = _atb_case(f"n={SPEED_N}, tile 32, timed", g, SPEED_N, SPEED_N, SPEED_N, 32)
    timing: dict[str, float] = {}

    def timed_fn(*args):
        if args[0] is not speed.args[0]:
            return fn(*args)
        timing["speedup"], result = speedup_over_naive(fn, args)
        return result

    def fast_enough(_got) -> str | None:
        speedup = timing.get("speedup", 0.0)
        if speedup < SPEEDUP_REQUIRED:
            return (f"correct, but only {speedup:.1f}x faster than the naive nest timed with it "
                    f"(needs {SPEEDUP_REQUIRED:g}x): is the innermost loop stride 1 over B and C, and does it "
                    f"vectorize (a 0-based loop over row slices)?")
        return None

    speed.check_result = fast_enough
    cases.append(speed)
    check("atb_tiled", timed_fn, cases, compare=_bitwise, learner=fn,
          figure=lambda: f"{timing['speedup']:.1f}x faster than the naive nest at n={SPEED_N}")


# ------------------------------------------------------------------------------- an LRU cache over a trace
def reference_lru_misses(addresses, line_bytes: int, n_sets: int, ways: int) -> int:
    """Misses of a set-associative LRU cache on a trace of byte addresses: line = address // line_bytes lives in
    set line % n_sets, which holds ``ways`` lines; a hit makes its line the most recent, a miss evicts the least
    recent line of a full set. (On a matmul trace it agrees with the lesson's ``simulate_matmul_misses``.)"""
    sets = [OrderedDict() for _ in range(n_sets)]  # per set: its lines, least recently used first
    misses = 0
    for address in np.asarray(addresses, dtype=np.int64).tolist():
        line = address // line_bytes
        lines = sets[line % n_sets]
        if line in lines:
            lines.move_to_end(line)
        else:
            misses += 1
            if len(lines) == ways:
                lines.popitem(last=False)
            lines[line] = None
    return misses


def _same_count(got, expected) -> bool:
    """A whole number of misses: an int, ``np.int64`` or 0-d integer array; not a bool, not a float."""
    got = as_python_scalar(got)
    return isinstance(got, int) and not isinstance(got, bool) and got == expected


def _lines_trace(lines, line_bytes: int, offsets=None) -> np.ndarray:
    """Byte addresses of a list of line numbers (at byte ``offsets`` into each line, 0 by default)."""
    lines = np.asarray(lines, dtype=np.int64)
    return lines * line_bytes + (0 if offsets is None else np.asarray(offsets, dtype=np.int64))


def _random_trace(g, line_bytes: int, n_sets: int, ways: int) -> tuple[str, np.ndarray]:
    """A matmul nest's trace, or a walk with locality over a working set about the size of the cache."""
    if g.random() < 0.4:
        n, order = int(g.integers(3, 10)), LOOP_ORDERS[int(g.integers(len(LOOP_ORDERS)))]
        tile = int(g.integers(1, n + 1))
        element = int(g.choice([4, 8]))
        return f"matmul n={n} {order} tile {tile}, {element}-byte elements", matmul_trace(n, order, tile, element)
    capacity = n_sets * ways
    working = max(2, int(round(capacity * float(g.uniform(0.6, 2.0)))))
    length = int(g.integers(400, 2000))
    lines = np.empty(length, dtype=np.int64)
    lines[0] = g.integers(working)
    for t in range(1, length):  # mostly near the last line, sometimes a jump: hits, misses and evictions
        lines[t] = (lines[t - 1] + g.integers(-2, 3)) % working if g.random() < 0.7 else g.integers(working)
    offsets = g.integers(0, line_bytes // 4, length) * 4
    return f"{length} accesses over {working} lines", _lines_trace(lines, line_bytes, offsets)


def check_lru_misses(fn) -> None:
    """``fn(addresses, line_bytes, n_sets, ways)`` -> the number of misses (an int) of a set-associative LRU cache
    on the trace: direct-mapped and fully associative caches, a trace that fits exactly and one a line too big,
    the first line's recency against the empty ways, matmul traces and random walks over random geometries."""
    cyclic = list(range(8)) * 3
    fixed = [
        ("example: [0, 8, 64, 0, 128, 0, 64], 64-byte lines, 1 set x 2 ways", [0, 8, 64, 0, 128, 0, 64], 64, 1, 2),
        ("a trace that fits exactly: 8 lines in 2 sets x 4 ways, walked 3 times", _lines_trace(cyclic, 64), 64, 2, 4),
        ("one line more than fits: 9 lines, fully associative 1 x 8, walked 3 times",
         _lines_trace(list(range(9)) * 3, 32), 32, 1, 8),
        ("direct-mapped, lines 0 and 4 share set 0 of 4, alternating", _lines_trace([0, 4] * 4, 64), 64, 4, 1),
        ("direct-mapped, lines 0 and 1 in sets 0 and 1, alternating", _lines_trace([0, 1] * 4, 64), 64, 2, 1),
        ("1 set x 2 ways: A, B, A (the first line against an empty way)", _lines_trace([5, 9, 5], 16), 16, 1, 2),
        ("every 8-byte element of two 64-byte lines", np.arange(0, 128, 8), 64, 4, 2),
        ("LRU, not FIFO: a hit keeps a line", _lines_trace([0, 1, 2, 3, 0, 4, 0, 1, 0], 64), 64, 1, 4),
        ("matmul n=8 ijk untiled, 64-byte lines, 4 sets x 2 ways", matmul_trace(8, "ijk"), 64, 4, 2),
        ("matmul n=8 ikj tile 4, 32-byte lines, 2 sets x 4 ways", matmul_trace(8, "ikj", 4), 32, 2, 4),
    ]
    cases = [Case(label, (np.asarray(trace, dtype=np.int64), line, sets, ways),
                  expected=reference_lru_misses(trace, line, sets, ways)) for label, trace, line, sets, ways in fixed]
    g = rng()
    for _ in range(6):
        line_bytes, n_sets = int(g.choice([16, 32, 64, 128])), int(g.choice([1, 2, 4, 8, 16]))
        ways = int(g.choice([1, 2, 4, 8]))
        label, trace = _random_trace(g, line_bytes, n_sets, ways)
        cases.append(Case(f"{label}; {line_bytes}-byte lines, {n_sets} sets x {ways} ways",
                          (trace, line_bytes, n_sets, ways), expected=reference_lru_misses(trace, line_bytes, n_sets,
                                                                                            ways)))
    check("lru_misses", fn, cases, compare=_same_count)
