"""Checks for the exercises of 10_peft: a LoRA layer's forward, backward and merge, LoRA parameter counts,
NF4 block-wise quantization, and a QLoRA training step."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from mlsys_lab.exercises import Case, check, rng, short
from mlsys_lab.peft.accounting import lora_params_for_shapes
from mlsys_lab.peft.nf4 import int4_levels, nf4_quantize
from mlsys_lab.peft.qlora import (
    ADAPTERS,
    BASE,
    base_weights,
    init_qlora_state,
    qlora_loss,
    qlora_step,
    shifted_task,
    train_qlora,
)
from mlsys_lab.training_memory.quantize import nf4_levels


def reference_lora_forward(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray,
                           scale: float) -> np.ndarray:
    # h = x W0 + s · (x A) B: the low-rank path never forms the d_in × d_out product A B
    return x @ w + scale * ((x @ a) @ b)


def reference_lora_merge(w: np.ndarray, a: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    return w + scale * (a @ b)


def _layer_case(g: np.random.Generator, zero_b: bool = False) -> tuple[str, tuple]:
    n, d_in, d_out, r = (int(g.integers(low, high)) for low, high in ((1, 9), (2, 40), (2, 40), (1, 5)))
    r = min(r, d_in, d_out)
    x, w = g.normal(size=(n, d_in)), g.normal(size=(d_in, d_out))
    a = g.normal(size=(d_in, r))
    b = np.zeros((r, d_out)) if zero_b else g.normal(size=(r, d_out))
    scale = float(g.choice([0.5, 1.0, 2.0, 16 / r]))
    label = f"x {x.shape}, W {w.shape}, r={r}, scale={scale:g}" + (", B = 0" if zero_b else "")
    return label, (x, w, a, b, scale)


def _large_base_case(g: np.random.Generator) -> tuple[str, tuple]:
    """A base whose entries are ~2⁴⁰ and cancel exactly in x W₀, beside an O(1) low-rank update.

    x W₀ + s (x A) B is then exact, while W₀ + s·A·B rounds the update to W₀'s spacing (2⁻¹²): the merged
    matrix cannot hold a small update to a large weight (the reason merged low-precision weights lose LoRA).
    """
    n, half, d_out, r = int(g.integers(1, 5)), int(g.integers(2, 12)), int(g.integers(2, 20)), int(g.integers(1, 4))
    m = g.integers(1, 5, size=(half, d_out)) * g.choice([-1.0, 1.0], size=(half, d_out))
    w = np.empty((2 * half, d_out))
    w[0::2], w[1::2] = m * 2.0 ** 40, -m * 2.0 ** 40  # rows in ± pairs
    x = np.repeat(g.integers(-4, 5, size=(n, half)).astype(float), 2, axis=1)  # equal entries in each pair
    a, b = g.normal(size=(2 * half, r)), g.normal(size=(r, d_out))
    return f"x {x.shape}, W₀ {w.shape} with entries ~2^40 that cancel in x W₀, r={r}", (x, w, a, b, 2.0)


def _large_adapter_case(g: np.random.Generator) -> tuple[str, tuple]:
    """An A whose entries are ~2⁴⁰ and cancel exactly in x A (rows in ± pairs, x equal in each pair).

    (x A) B is then exact and O(1), while the d_in × d_out product A B holds entries ~2⁴⁰ rounded to 2⁻¹²: any
    forward that forms it, merged into W₀ or not (``x @ (A @ B)``), loses the update's digits when x sums them.
    """
    n, half, d_out, r = int(g.integers(1, 5)), int(g.integers(2, 12)), int(g.integers(2, 20)), int(g.integers(1, 4))
    big = g.integers(1, 5, size=(half, r)) * g.choice([-1.0, 1.0], size=(half, r)) * 2.0 ** 40
    a = np.empty((2 * half, r))
    a[0::2] = big + g.integers(-512, 513, size=(half, r)) * 2.0 ** -8  # x A keeps only these dyadic parts: exact
    a[1::2] = -big + g.integers(-512, 513, size=(half, r)) * 2.0 ** -8
    x = np.repeat(g.integers(-4, 5, size=(n, half)).astype(float), 2, axis=1)
    w, b = g.normal(size=(2 * half, d_out)), g.normal(size=(r, d_out))
    return f"x {x.shape}, A {a.shape} with entries ~2^40 that cancel in x A, r={r}", (x, w, a, b, 2.0)


def check_lora_forward(fn) -> None:
    """``fn(x, w, a, b, scale)`` -> x W + scale · (x A) B; with B = 0 it must equal x W exactly.

    One hidden case has a base of large entries that cancel in x W₀ (exactly, in floating point) beside an
    O(1) update: forming W₀ + s·A·B first rounds the update away there. Another has an A of large entries that
    cancel in x A: forming the d_in × d_out product A B at all (``x @ (A @ B)``) rounds there. Only the factored
    path, x W₀ + s·(x A) B, passes both.
    """
    g = rng()
    cases = []
    for i in range(10):
        label, args = _layer_case(g, zero_b=(i == 0))
        cases.append(Case(label, args, expected=reference_lora_forward(*args)))
    for make in (_large_base_case, _large_base_case, _large_adapter_case, _large_adapter_case):
        label, args = make(g)
        cases.append(Case(label, args, expected=reference_lora_forward(*args)))
    check("lora_forward", fn, cases)


def check_lora_merge(fn) -> None:
    """``fn(w, a, b, scale)`` -> the merged weight; x @ merged must equal the unmerged forward."""
    g = rng()
    cases = []
    for _ in range(10):
        label, (x, w, a, b, scale) = _layer_case(g)

        def same_outputs(merged, x=x, w=w, a=a, b=b, scale=scale):
            unmerged = reference_lora_forward(x, w, a, b, scale)
            ok = np.allclose(x @ np.asarray(merged), unmerged, rtol=1e-9, atol=1e-9)
            return None if ok else "x @ merged differs from x W + s (x A) B"

        cases.append(Case(label, (w, a, b, scale), expected=reference_lora_merge(w, a, b, scale),
                          check_result=same_outputs))
    check("lora_merge", fn, cases)


def check_lora_param_count(fn) -> None:
    """``fn(shapes, rank, n_layers)`` -> LoRA parameters for (d_in, d_out) weights in every layer."""
    cases = [Case("GPT-3 175B, W_q and W_v, r=4", ([(12288, 12288)] * 2, 4, 96), expected=18_874_368),
             Case("GPT-3 175B, W_q and W_v, r=1", ([(12288, 12288)] * 2, 1, 96), expected=4_718_592)]
    g = rng()
    for _ in range(8):
        shapes = [(int(g.integers(1, 9000)), int(g.integers(1, 9000))) for _ in range(int(g.integers(1, 8)))]
        rank, n_layers = int(g.integers(1, 128)), int(g.integers(1, 100))
        cases.append(Case(f"{len(shapes)} shapes, r={rank}, {n_layers} layers", (shapes, rank, n_layers),
                          expected=lora_params_for_shapes(shapes, rank, n_layers)))
    check("lora_param_count", fn, cases)


# ------------------------------------------------------------------ a LoRA layer's backward, never forming A B
def reference_lora_backward(x, w, a, b, scale, dy):
    # dX = dY Wᵀ + s (dY Bᵀ) Aᵀ, dA = s xᵀ (dY Bᵀ), dB = s (x A)ᵀ dY: every intermediate is (n, r); no dW
    dy_bt = dy @ b.T
    return dy @ w.T + scale * (dy_bt @ a.T), scale * (x.T @ dy_bt), scale * ((x @ a).T @ dy)


GRADIENT_NAMES = ("dX", "dA", "dB")
EXACT_RTOL = 1e-9  # of the largest |entry|: association orders of the factored path differ by ~1e-15


def _gradient_problem(expected):
    def problem(got) -> str | None:
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return f"got {short(got)}, expected the three arrays (dX, dA, dB)"
        for name, g, e in zip(GRADIENT_NAMES, got, expected, strict=True):
            try:
                g = np.asarray(g, dtype=float)
            except (TypeError, ValueError):
                return f"{name} is {short(g)}, not an array of numbers"
            if g.shape != e.shape:
                return f"{name} has shape {g.shape}, expected {e.shape}"
            if not np.all(np.abs(g - e) <= EXACT_RTOL * max(1.0, float(np.abs(e).max()))):
                return f"{name} is off by up to {float(np.abs(g - e).max()):.3g}: got {short(g)}, expected {short(e)}"
        return None
    return problem


def _trap_case(g: np.random.Generator) -> tuple[str, tuple]:
    """B with entries ~2³⁰ whose columns come in ± pairs, dY with equal entries in each pair: dY Bᵀ is exact
    (every product and partial sum is a multiple of 2⁻⁸ below 2⁵³) and O(1). Any d_in × d_out product made
    from B (A B, W + s A B, or xᵀ dY times Bᵀ) rounds entries ~2³³ to ~10⁻⁶ and the pairs no longer cancel."""
    n, half, d_in, r = int(g.integers(1, 6)), int(g.integers(3, 12)), int(g.integers(3, 30)), int(g.integers(1, 4))
    beta = g.integers(1, 5, size=(r, half)) * g.choice([-1.0, 1.0], size=(r, half))
    b = np.empty((r, 2 * half))
    b[:, 0::2] = beta * 2.0 ** 30 + g.integers(-512, 513, size=(r, half)) * 2.0 ** -8
    b[:, 1::2] = -beta * 2.0 ** 30 + g.integers(-512, 513, size=(r, half)) * 2.0 ** -8
    dy = np.repeat(g.integers(-4, 5, size=(n, half)).astype(float), 2, axis=1)
    x, w, a = g.normal(size=(n, d_in)), g.normal(size=(d_in, 2 * half)), g.normal(size=(d_in, r))
    scale = float(g.choice([0.5, 2.0, 4.0]))  # powers of two: s·dY stays exact too
    return (f"x {x.shape}, W {w.shape}, r={r}, scale={scale:g}, B with entries ~2^30 that cancel in dY Bᵀ",
            (x, w, a, b, scale, dy))


def _backward_case(label: str, args: tuple) -> Case:
    expected = reference_lora_backward(*args)
    return Case(label, args, expected=expected, check_result=_gradient_problem(expected))


def check_lora_backward(fn) -> None:
    """``fn(x, w, a, b, scale, dy)`` -> (dX, dA, dB) of y = x W + scale · (x A) B, equal to the factored path.

    Two hidden cases hold a B of huge entries that cancel exactly in dY Bᵀ: there the factored path is exact,
    while forming any d_in × d_out matrix from B (the merged W + s·A·B, A B itself, or the dense gradient
    xᵀ dY before multiplying by Bᵀ) rounds the cancellation away.
    """
    g = rng()
    example = (np.array([[1.0, 2.0]]), np.eye(2), np.array([[1.0], [0.0]]), np.array([[0.0, 1.0]]), 2.0,
               np.array([[1.0, 1.0]]))
    cases = [_backward_case("example: x [[1, 2]], W = I, A [[1], [0]], B [[0, 1]], scale 2, dY [[1, 1]]", example)]
    for i in range(7):
        n, d_in, d_out = int(g.integers(1, 9)), int(g.integers(2, 40)), int(g.integers(2, 40))
        if i == 1:
            d_out = d_in + int(g.integers(1, 9))  # non-square, rank 1
        r = 1 if i in (0, 1) else int(g.integers(2 if i == 3 else 1, min(d_in, d_out, 6) + 1))
        x, w, a = g.normal(size=(n, d_in)), g.normal(size=(d_in, d_out)), g.normal(size=(d_in, r))
        b = np.zeros((r, d_out)) if i == 2 else g.normal(size=(r, d_out))
        scale = float(g.choice([0.5, 2.0, 3.0, 16 / r])) if i else 0.75
        label = f"x {x.shape}, W {w.shape}, r={r}, scale={scale:g}" + (", B = 0 (LoRA's start)" if i == 2 else "")
        cases.append(_backward_case(label, (x, w, a, b, scale, g.normal(size=(n, d_out)))))
    cases += [_backward_case(*_trap_case(g)) for _ in range(2)]
    check("lora_backward", fn, cases, compare=lambda got, expected: True)  # _gradient_problem decides


# ------------------------------------------------------------------------------------ NF4 block quantization
def reference_nf4_quantize(w, levels, block_size):
    return nf4_quantize(w, levels, block_size)


def _nf4_case(label: str, w: np.ndarray, levels: np.ndarray, block_size: int) -> Case:
    codes_ref, absmax_ref = reference_nf4_quantize(w, levels, block_size)
    gap = float(np.diff(levels).max()) / 2

    def problem(got) -> str | None:
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return f"got {short(got)}, expected (codes, absmax)"
        try:
            codes, absmax = np.asarray(got[0]), np.asarray(got[1], dtype=float)
        except (TypeError, ValueError):
            return f"got {short(got)}, which is not two arrays of numbers"
        if absmax.shape != absmax_ref.shape:
            return f"absmax has shape {absmax.shape}, expected {absmax_ref.shape} (one per block of {block_size})"
        if not np.array_equal(absmax, absmax_ref):
            i = int(np.flatnonzero(absmax != absmax_ref)[0])
            return f"absmax of block {i} is {absmax[i]:.6g}, expected {absmax_ref[i]:.6g}"
        if codes.shape != codes_ref.shape or codes.dtype.kind not in "iuf":
            return f"codes have shape {codes.shape} (dtype {codes.dtype}), expected {codes_ref.shape} integers"
        if not np.array_equal(codes, codes_ref):
            i = int(np.flatnonzero(codes != codes_ref)[0])
            scaled = w[i] / absmax_ref[i // block_size] if absmax_ref[i // block_size] else 0.0
            return (f"code of weight {i} (w / absmax = {scaled:.6g}) is {short(codes[i])}, expected {codes_ref[i]} "
                    f"(level {levels[codes_ref[i]]:.6g})")
        restored = levels[codes.astype(np.int64)] * np.repeat(absmax, block_size)[:w.size]
        worst = float((np.abs(restored - w) - np.repeat(absmax, block_size)[:w.size] * gap).max())
        return None if worst <= 1e-12 else f"a restored weight is off by {worst:.3g} more than absmax · gap / 2"

    return Case(label, (w, levels, block_size), expected=(codes_ref, absmax_ref), check_result=problem)


def _exact_midpoints(levels: np.ndarray) -> np.ndarray:
    """The midpoints between adjacent levels that are exactly halfway in floating point (true ties)."""
    return np.array([(a + b) / 2 for a, b in zip(levels[:-1], levels[1:], strict=True)
                     if Fraction(a) + Fraction(b) == 2 * Fraction((a + b) / 2)])


def check_nf4_quantize(fn) -> None:
    """``fn(w, levels, block_size)`` -> (codes (n,) ints, absmax (n_blocks,)): block-wise absmax, nearest level.

    Codes must equal the reference's exactly (a tie between two levels takes the lower one), absmax too; the
    hidden cases hold a partial last block, a block of zeros, values on the midpoints, block sizes other
    than 64, and one case on uniform INT4 levels (the code is an argument).
    """
    g = rng()
    nf4 = nf4_levels()
    cases = [_nf4_case("example: w = [0.5, -1, 0, 0.25], blocks of 2", np.array([0.5, -1.0, 0.0, 0.25]), nf4, 2)]
    ties = np.concatenate([[1.0], _exact_midpoints(nf4), [-1.0]])  # absmax 1: w / absmax is the midpoint itself
    w = np.concatenate([g.permutation(ties), g.uniform(-0.99, 0.99, size=64 - ties.size)])
    cases.append(_nf4_case(f"{ties.size - 2} weights exactly halfway between two NF4 levels (ties), absmax 1, "
                           "blocks of 64", w, nf4, 64))
    dyadic = np.array([-1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0])
    w = g.permutation(np.concatenate([2 * _exact_midpoints(dyadic), 2 * dyadic]))  # absmax 2 (the level -1)
    cases.append(_nf4_case(f"levels {dyadic.tolist()}, every midpoint (ties) and every level, absmax 2, blocks of 32",
                           np.concatenate([w, g.uniform(-1.9, 1.9, size=5)]), dyadic, 32))
    n = 64 * int(g.integers(2, 5)) + int(g.integers(1, 64))
    w = g.normal(0, 0.02, size=n)
    w[64:128] = 0.0
    cases.append(_nf4_case(f"{n} weights, blocks of 64: the second block all zeros, the last one partial", w, nf4, 64))
    for _ in range(4):
        block = int(g.choice([16, 32, 64, 100, 128]))
        n = int(g.integers(block + 1, 5 * block)) if g.random() < 0.75 else block * int(g.integers(1, 5))
        w = g.normal(0, float(g.choice([0.02, 1.0, 30.0])), size=n)
        w[g.integers(0, n)] *= 8  # an outlier sets its block's absmax
        cases.append(_nf4_case(f"{n} normal weights, blocks of {block}", w, nf4, block))
    w = g.normal(size=int(g.integers(70, 200)))
    cases.append(_nf4_case(f"{w.size} weights on uniform INT4 levels k/7, blocks of 64", w, int4_levels(), 64))
    check("nf4_quantize", fn, cases, compare=lambda got, expected: True)  # each case's problem() decides


# ------------------------------------------------------------------------------------------ a QLoRA step
QLORA_STEPS, QLORA_LR, QLORA_MARGIN = 40, 0.2, 0.1


def reference_qlora_step(state, x, labels, lr):
    return qlora_step(state, x, labels, lr)


def _qlora_problem(state: dict, x, labels, lr: float):
    new_ref, loss_ref = qlora_step(state, x, labels, lr)

    def problem(got) -> str | None:
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not isinstance(got[0], dict):
            return f"got {short(got)}, expected (new state dict, loss)"
        new, loss = got
        for key in (*BASE, "levels"):
            if key not in new or not np.array_equal(np.asarray(new[key]), state[key]):
                return f"the frozen base changed: state['{key}'] is not the one passed in"
        for key in ("block_size", "scale"):
            if new.get(key) != state[key]:
                return f"state['{key}'] changed from {state[key]} to {short(new.get(key))}"
        for key in ADAPTERS:
            if key not in new or np.shape(new[key]) != state[key].shape:
                return f"state['{key}'] has shape {np.shape(new.get(key))}, expected {state[key].shape}"
            step, want = state[key] - np.asarray(new[key], dtype=float), state[key] - new_ref[key]
            if not np.allclose(step, want, rtol=1e-7, atol=1e-12 * max(1.0, float(np.abs(want).max()))):
                return f"the update of {key} (lr · d{key}) is {short(step)}, expected {short(want)}"
        try:
            loss = float(loss)
        except (TypeError, ValueError):
            return f"the loss is {short(loss)}, expected a number"
        if not np.isclose(loss, loss_ref, rtol=1e-6):  # another log-softmax differs from nn's by ~1e-12
            return f"the loss (before the step) is {loss:.6g}, expected {loss_ref:.6g}"
        return None

    return problem


def _qlora_state(g: np.random.Generator, zero_b: bool, block_size: int, rank: int | None = None,
                 scale: float | None = None) -> dict:
    d, h = int(g.integers(5, 40)), int(g.choice([i for i in range(5, 61) if i != block_size]))
    c = int(g.integers(2, 7))
    w1, w2 = g.normal(0, d ** -0.5, size=(d, h)), g.normal(0, h ** -0.5, size=(h, c))
    rank = rank or int(g.integers(1, min(c, 4) + 1))
    scale = float(g.choice([0.5, 2.0, 4.0])) if scale is None else scale
    return init_qlora_state(w1, w2, rank=rank, scale=scale, block_size=block_size,
                            seed=int(g.integers(1 << 30)), zero_b=zero_b)


def check_qlora_step(fn) -> None:
    """``fn(state, x, labels, lr)`` -> (new state, loss before the step): SGD on A1, B1, A2, B2 of the QLoRA classifier.

    Six single steps on fixed batches: every update equal to lr times the reference's gradient, the loss the
    reference's, the NF4 codes and absmax returned bit for bit. Then a training run of QLORA_STEPS steps from
    LoRA's start (B = 0), each step fed the state the previous one returned: the loss, computed here from the
    returned adapters and the original codes, must fall by at least (1 - QLORA_MARGIN) of the reference's drop.
    """
    g = rng()
    cases = []
    for i in range(6):
        block = 64 if i < 4 else int(g.choice([16, 32, 48]))
        state = _qlora_state(g, zero_b=(i == 0), block_size=block, rank=1 if i == 1 else None)
        d, c = state["a1"].shape[0], state["b2"].shape[1]
        n = int(g.integers(4, 40))
        x, labels = g.normal(size=(n, d)), g.integers(0, c, size=n)
        label = (f"one step, W1 {state['a1'].shape[0]}x{state['b1'].shape[1]}, W2 {state['a2'].shape[0]}x{c}, "
                 f"r={state['a1'].shape[1]}, blocks of {block}, scale {state['scale']:g}, batch {n}"
                 + (", B = 0 (LoRA's start)" if i == 0 else ""))
        cases.append(Case(label, (_copied(state), x, labels, 0.5), expected=None,
                          check_result=_qlora_problem(state, x, labels, 0.5)))
    start = _qlora_state(g, zero_b=True, block_size=64, rank=2, scale=2.0)
    w1, w2 = base_weights(start)
    x, labels = shifted_task(w1, w2, 128, seed=int(g.integers(1 << 30)), shift=2.0)

    def learner_run(state, x, labels, lr):
        for _ in range(QLORA_STEPS):
            state = fn(state, x, labels, lr)[0]
        return state

    def trained_enough(final) -> str | None:
        try:
            adapters = {k: np.asarray(final[k], dtype=float) for k in ADAPTERS}
        except (TypeError, KeyError, ValueError) as exc:
            return f"the state after {QLORA_STEPS} steps cannot be read ({type(exc).__name__})"
        final_ref, ref_losses = train_qlora(start, x, labels, QLORA_STEPS, QLORA_LR)  # only when reached
        ref_drop = ref_losses[0] - qlora_loss(final_ref, x, labels)
        drop = ref_losses[0] - qlora_loss({**start, **adapters}, x, labels)
        if not drop >= (1 - QLORA_MARGIN) * ref_drop:
            return (f"after {QLORA_STEPS} steps the loss fell by {drop:.4g}, the reference's by {ref_drop:.4g} "
                    f"(needs at least {(1 - QLORA_MARGIN) * ref_drop:.4g})")
        return None

    run = Case(f"{QLORA_STEPS} steps of lr {QLORA_LR} from B = 0 on a shifted task, batch 128",
               (_copied(start), x, labels, QLORA_LR), check_result=trained_enough)

    def step_or_run(*args):
        return learner_run(*args) if args[0] is run.args[0] else fn(*args)

    check("qlora_step", step_or_run, cases + [run], compare=lambda got, expected: True, learner=fn)


def _copied(state: dict) -> dict:
    """A copy for the learner's function: a step that changes its input in place cannot change the check's."""
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in state.items()}
