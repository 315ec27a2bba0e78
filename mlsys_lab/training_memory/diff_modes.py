"""Three ways to differentiate besides the tape (微分方式): numerical, symbolic, forward mode.

* Numerical (数值微分): f'(x) ≈ (f(x+h) − f(x−h)) / 2h. Truncation error h²·f'''/6 falls with h,
  rounding error ≈ ε·|f|/h grows as h shrinks: the best h is near ε^(1/3) (≈ 6e-6 in float64), and
  a gradient of n inputs costs 2n evaluations of f.
* Symbolic (符号微分): rewrite the expression with the rules. Exact, but without sharing the
  derivative of a product repeats both factors, so the written-out expression swells (Baydin et al.
  2018, §2.2, with the logistic map l ← 4l(1 − l)).
* Forward mode (前向模式): carry (value, derivative) pairs, dual numbers a + b·ε with ε² = 0. One pass
  gives the derivative along one input direction: n passes for a gradient of n inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_finite,
    check_int,
    check_positive,
    check_type,
)

EXP_MAX = math.log(np.finfo(np.float64).max)  # ≈ 709.78: the largest x whose exp is a finite float64


def central_difference(f: Callable[[float], float], x: float, step: float) -> float:
    """(f(x + h) − f(x − h)) / 2h: error O(h²) from truncation, O(ε/h) from rounding."""
    _check_callable("f", f)
    check_positive("step", step)
    return (f(x + step) - f(x - step)) / (2 * step)


def forward_difference(f: Callable[[float], float], x: float, step: float) -> float:
    """(f(x + h) − f(x)) / h: error O(h) from truncation, O(ε/h) from rounding."""
    _check_callable("f", f)
    check_positive("step", step)
    return (f(x + step) - f(x)) / step


def numerical_gradient(f: Callable[[np.ndarray], float], x: np.ndarray, step: float = 1e-6) -> np.ndarray:
    """∂f/∂x_i by central differences, one coordinate at a time: 2·x.size calls of f (float64)."""
    _check_callable("f", f)
    check_array("x", x, kinds="f", finite=True)
    check_positive("step", step)
    x = np.array(x, dtype=np.float64)
    grad = np.zeros_like(x)
    flat, grad_flat = x.reshape(-1), grad.reshape(-1)
    for i in range(flat.size):
        saved = flat[i]
        flat[i] = saved + step
        up = f(x)
        flat[i] = saved - step
        down = f(x)
        flat[i] = saved
        grad_flat[i] = (up - down) / (2 * step)
    return grad


def difference_errors(f, dfdx, x: float, steps: np.ndarray) -> dict[str, np.ndarray]:
    """|approximation − f'(x)| for forward and central differences at each step size (float64)."""
    _check_callable("f", f)
    _check_callable("dfdx", dfdx)
    check_finite("x", x)
    check_array("steps", steps, ndim=1, kinds="f", finite=True)
    steps = np.asarray(steps, dtype=np.float64)
    exact = dfdx(x)
    return {"forward": np.array([abs(forward_difference(f, x, h) - exact) for h in steps]),
            "central": np.array([abs(central_difference(f, x, h) - exact) for h in steps])}


def best_central_step(eps: float = float(np.finfo(np.float64).eps)) -> float:
    """h minimising h²/6 + ε/h (|f|, |f'''| ≈ 1): h* = (3ε)^(1/3)."""
    check_positive("eps", eps)
    return (3 * eps) ** (1 / 3)


# --- forward mode: dual numbers ---------------------------------------------------------------

@dataclass(frozen=True)
class Dual:
    """a + b·ε with ε² = 0: f(a + ε) = f(a) + f'(a)·ε, so ``derivative`` carries df/dx along."""

    value: float
    derivative: float = 0.0

    def __post_init__(self) -> None:
        check_finite("value", self.value)
        check_finite("derivative", self.derivative)

    def __add__(self, other):
        other = _dual(other)
        return Dual(self.value + other.value, self.derivative + other.derivative)

    __radd__ = __add__

    def __sub__(self, other):
        other = _dual(other)
        return Dual(self.value - other.value, self.derivative - other.derivative)

    def __rsub__(self, other):
        return _dual(other) - self

    def __mul__(self, other):
        other = _dual(other)  # (a + bε)(c + dε) = ac + (ad + bc)ε
        return Dual(self.value * other.value, self.value * other.derivative + self.derivative * other.value)

    __rmul__ = __mul__

    def __truediv__(self, other):
        other = _dual(other)
        return Dual(self.value / other.value,
                    (self.derivative * other.value - self.value * other.derivative) / other.value ** 2)

    def __neg__(self):
        return Dual(-self.value, -self.derivative)


def _dual(x) -> Dual:
    return x if isinstance(x, Dual) else Dual(float(x), 0.0)


def dual_sin(x: Dual) -> Dual:
    check_type("x", x, Dual)
    return Dual(math.sin(x.value), math.cos(x.value) * x.derivative)


def dual_exp(x: Dual) -> Dual:
    check_type("x", x, Dual)
    if x.value > EXP_MAX:  # math.exp would raise OverflowError ("math range error"), naming nothing
        raise ValueError(f"x.value must be <= {EXP_MAX:.2f} (exp of more overflows a float64); got {x.value:g}")
    return Dual(math.exp(x.value), math.exp(x.value) * x.derivative)


def dual_tanh(x: Dual) -> Dual:
    check_type("x", x, Dual)
    y = math.tanh(x.value)
    return Dual(y, (1 - y * y) * x.derivative)


def forward_mode_gradient(f: Callable[[list[Dual]], Dual], x: list[float]) -> tuple[list[float], int]:
    """Gradient of f: Rⁿ → R by forward mode: seed one input with ε at a time. Returns (grad, n_passes)."""
    _check_callable("f", f)
    check_array("x", x, ndim=1, kinds="fiu", finite=True)  # a point of Rⁿ: one number per input
    grad = []
    for i in range(len(x)):
        seeded = [Dual(float(v), 1.0 if j == i else 0.0) for j, v in enumerate(x)]
        grad.append(f(seeded).derivative)
    return grad, len(x)


# --- symbolic: expressions as nested tuples, differentiated by the textbook rules -------------

X = ("x",)


def _check_callable(name: str, f) -> None:
    if not callable(f):
        raise TypeError(f"{name} must be a callable; got {type(f).__name__} {f!r:.40}")


def _check_expression(name: str, expr) -> None:
    """An expression is ("x",), ("const", c) or (op, operand, ...), nested: TypeError naming ``name``."""
    if not isinstance(expr, tuple) or not expr or not isinstance(expr[0], str):
        raise TypeError(f"{name} must be an expression tuple such as ('mul', ('x',), ('const', 2.0)); got {expr!r:.40}")


def const(c: float) -> tuple:
    check_finite("c", c)
    return ("const", float(c))


def logistic_map(n: int) -> tuple:
    """l₁ = x, l_{k+1} = 4·l_k·(1 − l_k) (Baydin et al. 2018, Table 1)."""
    check_int("n", n, low=1, high=64)  # the expression doubles with each step
    expr = X
    for _ in range(n - 1):
        expr = ("mul", ("mul", const(4), expr), ("sub", const(1), expr))
    return expr


def differentiate(expr: tuple, share: bool = False) -> tuple:
    """d expr / dx by the sum, product and chain rules, with no simplification.

    ``share=False`` differentiates a subexpression again each time it is used (textbook symbolic
    differentiation: the derivative swells even as a graph). ``share=True`` remembers each
    subexpression's derivative, which is what automatic differentiation does: linear growth.
    """
    _check_expression("expr", expr)
    check_bool("share", share)
    memo: dict[int, tuple] = {}

    def d(e: tuple) -> tuple:
        if share and id(e) in memo:
            return memo[id(e)]
        kind = e[0]
        if kind == "x":
            out = const(1)
        elif kind == "const":
            out = const(0)
        elif kind in ("add", "sub"):
            out = (kind, d(e[1]), d(e[2]))
        elif kind == "mul":
            out = ("add", ("mul", d(e[1]), e[2]), ("mul", e[1], d(e[2])))
        elif kind == "sin":
            out = ("mul", ("cos", e[1]), d(e[1]))
        elif kind == "cos":
            out = ("mul", ("sub", const(0), ("sin", e[1])), d(e[1]))
        else:
            raise ValueError(f"expression kind must be one of x, const, add, sub, mul, sin, cos; "
                             f"got {kind!r}")
        memo[id(e)] = out
        return out

    return d(expr)


def evaluate_expression(expr: tuple, x: float) -> float:
    """The expression's value at x."""
    _check_expression("expr", expr)
    kind = expr[0]
    if kind == "x":
        return x
    if kind == "const":
        return expr[1]
    if kind in ("sin", "cos"):
        return getattr(math, kind)(evaluate_expression(expr[1], x))
    a, b = evaluate_expression(expr[1], x), evaluate_expression(expr[2], x)
    return {"add": a + b, "sub": a - b, "mul": a * b}[kind]


def tree_size(expr: tuple) -> int:
    """Nodes of the expression written out in full (what a symbolic system prints without sharing)."""
    _check_expression("expr", expr)
    memo: dict[int, int] = {}

    def size(e: tuple) -> int:
        if id(e) not in memo:
            memo[id(e)] = 1 + sum(size(child) for child in e[1:] if isinstance(child, tuple))
        return memo[id(e)]

    return size(expr)


def dag_size(expr: tuple) -> int:
    """Distinct nodes when shared subexpressions are stored once (what a graph/tape stores)."""
    _check_expression("expr", expr)
    seen: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        stack.extend(child for child in e[1:] if isinstance(child, tuple))
    return len(seen)
