"""The check of exercise 6.5 of 08_parallelism: an FSDP (ZeRO-3) step that gathers and frees parameters.

The learner's ``fsdp_step`` runs on a :class:`ShardedGroup` that stays on the checking side. The group knows
every layer's parameter shards, so it recognises which layer each ``all_gather`` loads, counts the gathered
elements each rank holds until ``free(i)``, and the bytes the busiest rank sends; what it measured is the
budget, never a number the learner reports. Each case runs twice: once as it is, where the new shards must
equal single-device SGD (float64), and once on a group that marks what travels (every value a rank
*receives* from another rank is scaled by :data:`MARK`), where the result must be what the reference loop
gives on the same marked group: a rank that computed with the other ranks' shards directly, or summed the
other ranks' gradients itself, comes out unmarked.
"""

from __future__ import annotations

from typing import Callable, ClassVar

import numpy as np

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism.fsdp import layer_backward, layer_forward, sgd_reference, shard_flat, shard_size

MARK = 1.5  # the marked group scales every value a rank receives from another rank
ITEMSIZE = 8  # float64


class ShardedGroup:
    """``n_ranks`` simulated ranks holding the flat shards of a model's layers.

    * ``all_gather(shards)``: ``shards`` is one layer's shards, one 1-D array per rank (rank order); returns
      each rank's full flat buffer (N·k elements, the padding at the end). The layer counts as *gathered*
      on every rank until ``free(i)``.
    * ``free(i)``: drop the gathered copy of layer ``i``.
    * ``reduce_scatter(buffers)``: one 1-D array per rank of N·k elements; returns rank r's slice r of the sum.
    * ``all_reduce(buffers)``: every rank gets the sum (2× a reduce-scatter's bytes).
    """

    # What a learner's function may use when this object stays on the grader's side (course/checks.py).
    LEARNER_OPERATIONS: ClassVar[frozenset[str]] = frozenset({
        "all_gather", "free", "reduce_scatter", "all_reduce", "n_ranks",
    })

    def __init__(self, layer_shards: list[list[np.ndarray]], mark: float = 1.0) -> None:
        self.n_ranks = len(layer_shards[0])
        self._layers = [[np.array(s, dtype=float) for s in shards] for shards in layer_shards]
        self._mark = mark
        self._live = [0] * len(layer_shards)
        self.peak_gathered = 0          # elements per rank, the most held at once
        self.bytes_sent = 0             # by the busiest rank
        self.calls = {"all_gather": 0, "reduce_scatter": 0, "all_reduce": 0, "free": 0}

    def _gathered_now(self) -> int:
        return sum(live * self.n_ranks * self._layers[i][0].size for i, live in enumerate(self._live))

    def _buffers(self, name: str, buffers) -> list[np.ndarray]:
        if not isinstance(buffers, (list, tuple)) or len(buffers) != self.n_ranks:
            raise ValueError(f"{name} takes a list of {self.n_ranks} arrays, one per rank")
        arrays = [np.ravel(np.asarray(b, dtype=float)) for b in buffers]
        if len({a.size for a in arrays}) != 1:
            raise ValueError(f"{name}: every rank's buffer must have the same length; got {[a.size for a in arrays]}")
        return arrays

    def all_gather(self, shards) -> list[np.ndarray]:
        arrays = self._buffers("all_gather", shards)
        layer = next((i for i, own in enumerate(self._layers) if own[0].size == arrays[0].size
                      and all(np.array_equal(a, o) for a, o in zip(arrays, own, strict=True))), None)
        if layer is None:
            raise ValueError("all_gather: these are not the parameter shards of any layer (this group gathers "
                             "parameters; gradients are reduce-scattered)")
        self.calls["all_gather"] += 1
        self._live[layer] += 1
        self.peak_gathered = max(self.peak_gathered, self._gathered_now())
        self.bytes_sent += (self.n_ranks - 1) * arrays[0].size * ITEMSIZE
        return [np.concatenate([a if q == r else a * self._mark for q, a in enumerate(arrays)])
                for r in range(self.n_ranks)]

    def free(self, layer) -> None:
        i = int(layer)
        if not 0 <= i < len(self._live) or self._live[i] == 0:
            raise ValueError(f"free({layer}): layer {layer} is not gathered")
        self.calls["free"] += 1
        self._live[i] -= 1

    def reduce_scatter(self, buffers) -> list[np.ndarray]:
        arrays = self._buffers("reduce_scatter", buffers)
        n = self.n_ranks
        if arrays[0].size % n:
            raise ValueError(f"reduce_scatter: the buffers' length {arrays[0].size} is not a multiple of "
                             f"n_ranks={n} (pad them as the shards are padded)")
        k = arrays[0].size // n
        self.calls["reduce_scatter"] += 1
        self.bytes_sent += (n - 1) * k * ITEMSIZE
        return [sum((a if q == r else a * self._mark)[r * k:(r + 1) * k] for q, a in enumerate(arrays))
                for r in range(n)]

    def all_reduce(self, buffers) -> list[np.ndarray]:
        arrays = self._buffers("all_reduce", buffers)
        n = self.n_ranks
        self.calls["all_reduce"] += 1
        self.bytes_sent += int(2 * (n - 1) * arrays[0].size * ITEMSIZE / n)
        return [sum(a if q == r else a * self._mark for q, a in enumerate(arrays)) for r in range(n)]

    def gathered_layers(self) -> list[int]:
        """The layers still gathered (each index once per gather not yet freed)."""
        return [i for i, live in enumerate(self._live) for _ in range(live)]


def reference_fsdp_step(x_shards, target_shards, param_shards, shapes, lr, group):
    """Gather each layer just before its forward and again before its backward, free it after each use,
    reduce-scatter the padded gradient (mean over ranks), update the own shard."""
    n, n_layers = len(x_shards), len(shapes)

    def gathered(i):
        full = group.all_gather([param_shards[r][i] for r in range(n)])
        size = shapes[i][0] * shapes[i][1]
        return [f[:size].reshape(shapes[i]) for f in full]

    hs, caches = list(x_shards), [[None] * n_layers for _ in range(n)]
    for i in range(n_layers):
        w = gathered(i)
        for r in range(n):
            hs[r], caches[r][i] = layer_forward(hs[r], w[r], i == n_layers - 1)
        group.free(i)
    dys = [mse_loss(hs[r], target_shards[r])[1] / n for r in range(n)]      # the loss: the mean over ranks
    new = [[None] * n_layers for _ in range(n)]
    for i in reversed(range(n_layers)):
        w = gathered(i)
        grads = []
        for r in range(n):
            dys[r], dw = layer_backward(dys[r], caches[r][i], w[r])
            padded = np.zeros(n * param_shards[r][i].size)
            padded[:dw.size] = dw.ravel()
            grads.append(padded)
        group.free(i)
        g = group.reduce_scatter(grads)
        for r in range(n):
            new[r][i] = param_shards[r][i] - lr * g[r]
    return new


def _shards_problem(got, expected: list[list[np.ndarray]], what: str) -> str | None:
    n, n_layers = len(expected), len(expected[0])
    if not isinstance(got, (list, tuple)) or len(got) != n:
        return f"return one list of {n_layers} shards per rank ({n} lists); got {type(got).__name__}"
    for r in range(n):
        if not isinstance(got[r], (list, tuple)) or len(got[r]) != n_layers:
            return f"rank {r}: return {n_layers} shards, one per layer"
        for i in range(n_layers):
            try:
                arr = np.asarray(got[r][i], dtype=float)
            except (TypeError, ValueError):
                return f"rank {r}, layer {i}: the shard is not an array of numbers"
            want = expected[r][i]
            if arr.shape != want.shape:
                return f"rank {r}, layer {i}: shard of shape {arr.shape}; its shard has ⌈Ψ_i/N⌉ = {want.size} elements"
            if not np.allclose(arr, want, rtol=1e-9, atol=1e-12):
                j = int(np.argmax(~np.isclose(arr, want, rtol=1e-9, atol=1e-12)))
                return f"rank {r}, layer {i}, element {j}: got {arr[j]:.6g}, {what} gives {want[j]:.6g}"
    return None


def _budget_problem(group: ShardedGroup, sizes: list[int], n: int) -> str | None:
    if group.gathered_layers():
        return f"layers {group.gathered_layers()} are still gathered at the end of the step: free each after use"
    per_layer = sorted((n * shard_size(s, n) for s in sizes), reverse=True)
    budget = sum(per_layer[:2])
    if group.peak_gathered > budget:
        return (f"held {group.peak_gathered} gathered elements per rank at once; the budget is the two largest "
                f"layers, {budget} (gather each layer just before use and free it right after)")
    due = 3 * (n - 1) * sum(shard_size(s, n) for s in sizes) * ITEMSIZE
    if group.bytes_sent > due:
        return (f"the busiest rank sent {group.bytes_sent} bytes; two all-gathers and one reduce-scatter per "
                f"layer send 3(N−1)·Σk_i·8 = {due}")
    calls, n_layers = group.calls, len(sizes)
    if calls["all_reduce"] or calls["all_gather"] != 2 * n_layers or calls["reduce_scatter"] != n_layers:
        return (f"called all_gather {calls['all_gather']}×, reduce_scatter {calls['reduce_scatter']}×, all_reduce "
                f"{calls['all_reduce']}×; due: {2 * n_layers}, {n_layers}, 0 (each layer gathered in forward and in "
                "backward, its gradient reduce-scattered)")
    return None


def _run(fn: Callable, xs, ts, weights, lr) -> str:
    """'ok', or what is wrong: the shards against single-device SGD, the budgets, then the marked run."""
    n, shapes = len(xs), [w.shape for w in weights]
    sizes = [w.size for w in weights]
    layer_shards = [shard_flat(w, n) for w in weights]                      # L × N × (k_i,)
    param_shards = [[layer_shards[i][r] for i in range(len(weights))] for r in range(n)]
    x, t = np.concatenate(xs), np.concatenate(ts)
    expected = [[shard_flat(w, n)[r] for w in sgd_reference(x, t, weights, lr)] for r in range(n)]
    group = ShardedGroup(layer_shards)
    args = ([a.copy() for a in xs], [a.copy() for a in ts], [[s.copy() for s in rank] for rank in param_shards],
            [tuple(s) for s in shapes], lr)
    problem = _shards_problem(fn(*args, group), expected, "single-device SGD") or _budget_problem(group, sizes, n)
    if problem or n == 1:
        return problem or "ok"
    marked_expected = reference_fsdp_step(*args, ShardedGroup(layer_shards, MARK))
    got = fn(*args, ShardedGroup(layer_shards, MARK))
    problem = _shards_problem(got, marked_expected, "the loop run on what the collectives delivered")
    if problem:
        return (f"{problem}: the check re-ran with every value a rank receives scaled by {MARK} and your result "
                "did not follow (compute only with what all_gather returns, and update with what "
                "reduce_scatter returns)")
    return "ok"


def _case(fn: Callable, label: str, g: np.random.Generator, n: int, dims: list[int], batch: int) -> Case:
    weights = [g.normal(size=(a, b)) / np.sqrt(a) for a, b in zip(dims[:-1], dims[1:], strict=True)]
    xs = [g.normal(size=(batch, dims[0])) for _ in range(n)]
    ts = [g.normal(size=(batch, dims[-1])) for _ in range(n)]
    lr = float(g.uniform(0.05, 0.5))
    return Case(label, (fn, xs, ts, weights, lr), expected="ok", check_result=lambda got: None if got == "ok" else got)


def check_fsdp_step(fn: Callable) -> None:
    """``fn(x_shards, target_shards, param_shards, shapes, lr, group)`` -> each rank's new shards, per layer.

    Equal to single-device SGD on the whole batch; the group measures the budget: at most the two largest
    layers gathered at once and none at the end, each layer gathered twice and its gradient reduce-scattered
    once (3(N−1)·Σk_i·8 bytes, no all-reduce), and, on the marked re-run, results built from what the
    collectives delivered.
    """
    g = rng()
    fixed = [(4, [3, 5, 4, 2], 2, "N=4, dims 3→5→4→2 (the example)"), (1, [2, 3, 3, 1], 2, "N=1"),
             (7, [2, 1, 3, 2], 1, "N=7 > Ψ of a layer (shards of padding)"), (3, [4, 4, 4, 4], 3, "N=3, 4×4 layers"),
             (2, [5, 3, 2, 4, 3], 1, "N=2, five layers, odd sizes")]
    cases = []
    for n, dims, batch, label in fixed:
        cases.append(_case(fn, label, g, n, dims, batch))
    for _ in range(6):
        n = int(g.integers(2, 8))
        while True:
            dims = [int(d) for d in g.integers(1, 8, size=int(g.integers(4, 6)))]
            if any((a * b) % n for a, b in zip(dims[:-1], dims[1:], strict=True)):
                break                                                     # some layer leaves a remainder
        cases.append(_case(fn, f"N={n}, dims {'→'.join(map(str, dims))}", g, n, dims, int(g.integers(1, 4))))
    check("fsdp_step", _run, cases, compare=lambda got, expected: True, learner=fn)
