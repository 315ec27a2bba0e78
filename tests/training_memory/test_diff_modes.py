"""Do the numerical, symbolic and forward-mode derivatives agree with each other and with calculus?"""

import math

import numpy as np
import pytest

from mlsys_lab.training_memory.diff_modes import (
    Dual,
    best_central_step,
    central_difference,
    dag_size,
    difference_errors,
    differentiate,
    dual_exp,
    dual_sin,
    dual_tanh,
    evaluate_expression,
    forward_mode_gradient,
    logistic_map,
    numerical_gradient,
    tree_size,
)


def test_central_difference_error_is_second_order_then_rounding():
    steps = np.array([1e-1, 1e-2, 1e-3])
    central = difference_errors(math.sin, math.cos, 1.0, steps)["central"]
    assert central[0] / central[1] == pytest.approx(100, rel=0.05)  # O(h²)
    tiny = difference_errors(math.sin, math.cos, 1.0, np.array([1e-13]))["central"][0]
    assert tiny > 1e-5 * 1e-3  # rounding dominates at very small steps
    assert best_central_step() == pytest.approx(8.7e-6, rel=0.01)
    assert central_difference(lambda x: x ** 3, 2.0, 1e-3) == pytest.approx(12.0, abs=1e-5)


def test_dual_numbers_give_exact_derivatives():
    x = Dual(0.7, 1.0)
    y = dual_sin(x) * dual_exp(x) / (1 + x * x) - dual_tanh(x)
    f = lambda v: math.sin(v) * math.exp(v) / (1 + v * v) - math.tanh(v)  # noqa: E731
    assert y.derivative == pytest.approx(central_difference(f, 0.7, 1e-5), rel=1e-8)
    grad, passes = forward_mode_gradient(lambda v: v[0] * v[1] + dual_sin(v[2]), [2.0, 3.0, 0.5])
    assert grad == pytest.approx([3.0, 2.0, math.cos(0.5)]) and passes == 3


def test_numerical_gradient_of_a_quadratic():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(numerical_gradient(lambda v: 0.5 * v @ a @ v, x), a @ x, rtol=1e-8)


def test_symbolic_derivative_is_right_and_swells():
    for n in (1, 2, 5):
        expr = logistic_map(n)
        x, h = 0.3, 1e-6
        numeric = (evaluate_expression(expr, x + h) - evaluate_expression(expr, x - h)) / (2 * h)
        assert evaluate_expression(differentiate(expr), x) == pytest.approx(numeric, rel=1e-6)
        assert evaluate_expression(differentiate(expr, share=True), x) == pytest.approx(numeric, rel=1e-6)
    sizes = [tree_size(differentiate(logistic_map(n))) for n in range(2, 9)]
    assert all(b / a > 2 for a, b in zip(sizes, sizes[1:], strict=False))  # exponential growth
    shared = [dag_size(differentiate(logistic_map(n), share=True)) for n in range(2, 9)]
    assert len(set(np.diff(shared))) == 1  # linear growth: a constant number of nodes per step
    with pytest.raises(ValueError, match="expression kind"):
        differentiate(("pow", ("x",), ("x",)))
