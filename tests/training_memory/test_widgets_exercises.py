"""Does the lesson's explorer compute what the library says, and do its checks catch wrong answers?"""

import numpy as np

from mlsys_lab.exercises import training_memory as ex
from mlsys_lab.training_memory.accounting import TRANSFORMER_SHAPES, transformer_training_bytes
from mlsys_lab.training_memory.diff_modes import numerical_gradient
from mlsys_lab.widgets.training_memory import TrainingMemoryExplorer


def test_explorer_readout_and_error():
    explorer = TrainingMemoryExplorer()
    explorer.set(model="GPT-2 XL (1.5B)", batch=2, seq=1024, precision="fp32", optimizer="sgd")
    expected = transformer_training_bytes(TRANSFORMER_SHAPES["GPT-2 XL (1.5B)"], 2, 1024, "fp32", "sgd")
    assert explorer.error is None
    assert explorer.result["breakdowns"]["none"] == expected
    assert explorer.readout["bytes per parameter (states)"] == "8"
    heights = sum(bar[0].get_height() for bar in explorer.bars.values())
    assert np.isclose(heights, expected.total / 1e9)


def test_reference_layer_norm_backward_matches_central_differences():
    g = np.random.default_rng(3)
    for rows, cols in [(1, 4), (3, 5), (6, 9)]:
        x, grad_out = g.normal(size=(rows, cols)) * 2 + 1, g.normal(size=(rows, cols))

        def loss(x_, grad_out=grad_out):
            mu = x_.mean(axis=1, keepdims=True)
            return float(((x_ - mu) / np.sqrt(x_.var(axis=1, keepdims=True) + 1e-5) * grad_out).sum())

        numeric = numerical_gradient(loss, x, step=1e-5)
        assert np.allclose(ex.reference_layer_norm_backward(x, grad_out), numeric, rtol=1e-5, atol=1e-7)


def test_layer_norm_backward_hand_worked_example():
    # x = [1, 2, 3, 4]: μ = 2.5, var = 1.25, σ = √(1.25 + eps); g = [1, 0, 0, 0]: mean(g) = 1/4, y₀ = −1.5/σ,
    # mean(g·y) = y₀/4, so dx = (g − 1/4 − y·y₀/4)/σ
    x, grad_out = np.array([[1.0, 2.0, 3.0, 4.0]]), np.array([[1.0, 0.0, 0.0, 0.0]])
    sigma = np.sqrt(1.25 + 1e-5)
    y = (x - 2.5) / sigma
    expected = (grad_out - 0.25 - y * y[0, 0] / 4) / sigma
    assert np.allclose(ex.reference_layer_norm_backward(x, grad_out), expected, rtol=1e-12)


def _capture(check, fn, capsys):
    check(fn)
    return capsys.readouterr().out.strip()


def test_checks_pass_the_reference_and_fail_wrong_answers(capsys):
    assert _capture(ex.check_layer_norm_backward, ex.reference_layer_norm_backward, capsys).startswith("✓")
    assert _capture(ex.check_layer_norm_backward, lambda x, g: g, capsys).startswith("✗")
    assert _capture(ex.check_training_bytes, ex.reference_training_bytes, capsys).startswith("✓")
    states_only = lambda L, h, a, V, b, s: 16 * (12 * L * h * h + 13 * L * h + V * h)  # noqa: E731
    assert _capture(ex.check_training_bytes, states_only, capsys).startswith("✗")

    def groupwise(w, bits, group):
        q_max = 2 ** (bits - 1) - 1
        groups = w.reshape(w.shape[0], -1, group)
        scale = np.abs(groups).max(axis=2, keepdims=True) / q_max
        scale = np.where(scale == 0, 1.0, scale)
        return (np.round(groups / scale) * scale).reshape(w.shape)

    def per_tensor(w, bits, group):
        scale = np.abs(w).max() / (2 ** (bits - 1) - 1)
        return np.round(w / scale) * scale

    assert _capture(ex.check_quantize_groupwise, groupwise, capsys).startswith("✓")
    assert _capture(ex.check_quantize_groupwise, per_tensor, capsys).startswith("✗")

    def todo(*args):
        raise NotImplementedError()

    assert _capture(ex.check_quantize_groupwise, todo, capsys).startswith("…")


def test_build_exercises_say_not_attempted_for_a_stub_and_match_their_worked_examples(capsys):
    """Does each new check answer a stub with "not attempted", and do the prompts' examples hold for the references?"""
    from mlsys_lab.exercises import training_memory_references as build

    def todo(*args):
        raise NotImplementedError

    for check in (ex.check_loss_scaling, ex.check_checkpoint_plan, ex.check_softmax_cross_entropy):
        assert _capture(check, todo, capsys).startswith("…")
    grads = np.full((6, 2), 1e-3)
    grads[1, 0] = 100.0
    run = build.reference_loss_scaling(build.Fp16Backward(grads), np.zeros(2, np.float32), 1.0, 6, 1024.0, 2.0, 0.5, 2)
    assert run["scales"] == [1024, 1024, 512, 512, 1024, 1024] and run["skipped"] == [False, True] + [False] * 4
    np.testing.assert_allclose(run["weights"], -5e-3, rtol=1e-3)
    assert build.reference_checkpoint_plan([10] * 6, [2] * 6, [1] * 6, 34) == [0, 3]
    assert build.least_feasible_budget([10] * 6, [2] * 6, [1] * 6) <= 34
    losses, grad = build.reference_softmax_cross_entropy(np.array([[2.0, 1.0, 0.0]]), np.array([0]), 0.0, np.ones(1))
    np.testing.assert_allclose(losses, [np.log(np.e ** 2 + np.e + 1) - 2])
    np.testing.assert_allclose(grad, [[-0.33475904, 0.24472847, 0.09003057]], rtol=1e-7)
