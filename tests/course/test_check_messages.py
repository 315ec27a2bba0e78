"""Checks say what went wrong in the learner's terms: an argument changed in place, a shape, a length, a dtype.

A function that updates its input in place is told so, naming the argument, before any value is compared (in a
notebook, where the check sees its own arrays change, and when grading, where only the worker sees its copies
change and reports the names). A result of the wrong shape is told as a shape, not as two dumps of numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
from catalogue import verdict

from mlsys_lab.exercises import FAIL, PASS, Case, evaluate, mismatch


def sgd_in_place(w, g, lr):
    w -= lr * g
    return w


def sgd(w, g, lr):
    return w - lr * g


def sgd_cases(may_change_args: bool | tuple = ()) -> list[Case]:
    w, g = np.arange(4.0), np.ones(4)
    return [Case("w = [0, 1, 2, 3], g = 1, lr 0.5", (w.copy(), g.copy(), 0.5), expected=w - 0.5 * g,
                 may_change_args=may_change_args)]


def test_an_in_place_update_is_named_before_any_value_is_compared():
    verdict = evaluate("sgd_step", sgd_in_place, sgd_cases())
    assert verdict.status == FAIL
    assert "your function changed its argument `w` in place" in verdict.line, verdict.line
    assert "`w = w.copy()`" in verdict.line
    assert evaluate("sgd_step", sgd, sgd_cases()).status == PASS
    assert evaluate("sgd_step", sgd_in_place, sgd_cases(may_change_args=(0,))).status == PASS


def test_a_change_inside_a_dict_argument_is_named_with_its_key():
    def adam(state, g):
        state["m"] *= 0.9  # in place, inside the state dict
        return {"m": state["m"] + 0.1 * g}

    state = {"m": np.ones(3)}
    verdict = evaluate("adam", adam, [Case("one step", (state, np.ones(3)), expected={"m": np.ones(3)})])
    assert "changed its argument `state['m']` in place" in verdict.line, verdict.line


def test_a_real_exercise_names_the_logits_a_learner_shifted_in_place():
    """Lesson 06's softmax cross-entropy: `logits -= max` gives the right losses and gradients, and breaks the
    check's own arrays; the learner reads which argument, not a mismatch of values."""
    from mlsys_lab.exercises.training_memory import check_softmax_cross_entropy
    from mlsys_lab.exercises.training_memory_references import reference_softmax_cross_entropy

    def shifted_in_place(logits, labels, label_smoothing, grad_out):
        logits -= logits.max(axis=1, keepdims=True)
        return reference_softmax_cross_entropy(logits, labels, label_smoothing, grad_out)

    line = verdict(check_softmax_cross_entropy, shifted_in_place, 3).line
    assert "changed its argument `logits` in place" in line, line


@pytest.mark.parametrize(("got", "expected", "says"), [
    (np.zeros((64, 4)), np.zeros((4, 64)), "expected shape (4, 64), got shape (64, 4)"),
    ((np.zeros(3), np.zeros((2, 3))), (np.zeros(3), np.zeros((3, 2))),
     "item 2 of the result: expected shape (3, 2), got shape (2, 3)"),
    ((np.zeros(3),), (np.zeros(3), np.zeros(3)), "expected a tuple of 2 items, got 1 items"),
    (np.array(["a", "b"]), np.zeros(2), "expected an array of numbers, got dtype <U1"),
    (None, np.zeros(2), "expected an array of shape (2,), got NoneType"),
])
def test_a_wrong_shape_length_or_kind_is_said_as_such(got, expected, says):
    assert says in mismatch(got, expected)
    verdict = evaluate("f", lambda: got, [Case("the case", (), expected=expected)])
    assert verdict.status == FAIL and says in verdict.line, verdict.line


def test_values_are_shown_when_the_shapes_agree():
    assert mismatch(np.ones(2), np.zeros(2)) == "got [1. 1.], expected [0. 0.]"


def test_the_grader_hears_from_its_worker_that_an_argument_changed(worker_serving):
    """When grading, the check's arrays are not the ones the function got (those are the worker's copies): the
    worker reports the change, the stand-in raises it, and the verdict is the notebook's."""
    from mlsys_lab.course import wire

    for fn, status in ((sgd_in_place, FAIL), (sgd, PASS)):
        proxy, thread = worker_serving(fn)
        verdict = evaluate("sgd_step", proxy, sgd_cases())
        assert verdict.status == status, verdict.line
        if status == FAIL:
            assert "your function changed its argument `w` in place" in verdict.line, verdict.line
        wire.send_message(proxy.sock, {"op": "done", "line": ""})
        thread.join(5)
    proxy, thread = worker_serving(sgd_in_place)
    assert evaluate("sgd_step", proxy, sgd_cases(may_change_args=(0,))).status == PASS
    wire.send_message(proxy.sock, {"op": "done", "line": ""})
    thread.join(5)


def test_an_output_argument_the_exercise_asks_for_may_change():
    """Lesson 02's ``atb_tiled`` writes C into ``out``: that argument may change, the others may not."""
    def into_out(a, b, out):
        out[...] = a.T @ b
        a *= 2  # but not this one
        return out

    a, b = np.ones((2, 3)), np.ones((2, 4))
    case = Case("A, B ones", (a, b, np.full((3, 4), np.nan)), expected=np.full((3, 4), 2.0), may_change_args=(2,))
    assert "changed its argument `a` in place" in evaluate("atb", into_out, [case]).line


def test_a_failure_under_another_cases_theme_names_the_step_where_the_state_diverged():
    """Lesson 06's loss scaler unscaling in fp16 fails first on the case labelled "NaN at step 2": the message says
    the weights left GradScaler's at step 0 while the scales still agreed, so the learner looks at the unscale."""
    from mlsys_lab.exercises.training_memory import check_loss_scaling

    def unscale_in_fp16(backward, weights, lr, n_steps, init_scale, growth, backoff, interval):
        w, scale, clean, scales, skipped = np.array(weights, dtype=np.float32), float(init_scale), 0, [], []
        for step in range(n_steps):
            g16 = backward(step, scale)
            scales.append(scale)
            if not np.all(np.isfinite(g16)):
                skipped.append(True)
                scale, clean = scale * backoff, 0
                continue
            w = w - np.float32(lr) * (g16 / np.float16(scale)).astype(np.float32)  # fp16 underflows here
            skipped.append(False)
            clean += 1
            if clean == interval:
                scale, clean = scale * growth, 0
        return {"weights": w, "scales": scales, "skipped": skipped}

    line = verdict(check_loss_scaling, unscale_in_fp16, 0).line
    assert "NaN at step 2" in line  # the case's theme is not what went wrong...
    assert "they first differ from GradScaler's after step 0" in line, line  # ...and the message says so
