"""Do the hand-written training pieces match their definitions?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import SGD, Adam, accuracy, batches, cross_entropy, gelu, gelu_grad, mse_loss, softmax


def test_softmax_rows_sum_to_one_and_survive_large_logits():
    probs = asnumpy(softmax(xp.asarray([[1000.0, 1000.0], [0.0, np.log(3.0)]])))
    np.testing.assert_allclose(probs, [[0.5, 0.5], [0.25, 0.75]], rtol=1e-12)


def test_cross_entropy_value_and_gradient_match_finite_differences():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(5, 4)), rng.integers(0, 4, size=5)
    loss, grad = cross_entropy(xp.asarray(logits), xp.asarray(labels))
    shifted = logits - logits.max(axis=1, keepdims=True)
    expected = -np.mean(shifted[np.arange(5), labels] - np.log(np.exp(shifted).sum(axis=1)))
    assert loss == pytest.approx(expected, rel=1e-10)
    eps = 1e-6
    for i, j in [(0, 0), (2, 3), (4, 1)]:
        bumped = logits.copy()
        bumped[i, j] += eps
        numeric = (cross_entropy(xp.asarray(bumped), xp.asarray(labels))[0] - loss) / eps
        assert asnumpy(grad)[i, j] == pytest.approx(numeric, abs=1e-5)


def test_mse_loss_by_hand():
    # ŷ − y = [1, −2, 3, 0]: L = ½ · (1 + 4 + 9 + 0) / 4 = 1.75, dL/dŷ = (ŷ − y) / 4
    loss, grad = mse_loss(xp.asarray([[1.0, -2.0], [3.0, 0.0]]), xp.zeros((2, 2)))
    assert loss == 1.75
    np.testing.assert_array_equal(asnumpy(grad), [[0.25, -0.5], [0.75, 0.0]])


def test_mse_loss_is_half_of_pytorchs_and_says_so():
    """The course's MSE is ½·mean((ŷ − y)²); PyTorch's ``F.mse_loss`` is mean((ŷ − y)²). Wherever a learner meets
    it beside PyTorch (its docstring, lesson 08's FSDP exercise) the factor is stated."""
    from pathlib import Path

    import nbformat

    g = np.random.default_rng(0)
    y_hat, y = g.standard_normal((5, 3)), g.standard_normal((5, 3))
    loss, grad = mse_loss(xp.asarray(y_hat), xp.asarray(y))
    torch_mean = float(np.mean((y_hat - y) ** 2))  # torch.nn.functional.mse_loss's definition, reduction="mean"
    assert loss == pytest.approx(torch_mean / 2, rel=1e-15)
    np.testing.assert_allclose(asnumpy(grad), (y_hat - y) / y.size, rtol=1e-15)
    assert "PyTorch" in mse_loss.__doc__ and "without the ½" in mse_loss.__doc__
    root = Path(__file__).resolve().parents[2]
    cells = nbformat.read(root / "notebooks" / "08_parallelism.ipynb", as_version=4).cells
    prompt = next(c.source for c in cells if c.cell_type == "markdown" and "`mse_loss`" in c.source)
    assert "half of PyTorch's `F.mse_loss`" in prompt


def test_gelu_values_and_gradient():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 2.0])
    t = np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))
    np.testing.assert_allclose(asnumpy(gelu(xp.asarray(x))), 0.5 * x * (1 + t), rtol=1e-15)
    assert float(gelu(xp.asarray(0.0))) == 0.0 and float(gelu_grad(xp.asarray(0.0))) == 0.5
    h = 1e-6
    numeric = (asnumpy(gelu(xp.asarray(x + h))) - asnumpy(gelu(xp.asarray(x - h)))) / (2 * h)
    np.testing.assert_allclose(asnumpy(gelu_grad(xp.asarray(x))), numeric, rtol=1e-8, atol=1e-10)


def test_sgd_steps_in_place_against_the_gradient():
    w = xp.asarray([1.0, -2.0])
    params = {"w": w, "frozen": xp.asarray([5.0])}
    opt = SGD(0.5, trainable=("w",))
    opt.step(params, {"w": xp.asarray([2.0, -4.0]), "frozen": xp.asarray([1.0])})
    np.testing.assert_array_equal(asnumpy(w), [0.0, 0.0])  # the array itself changed
    assert float(params["frozen"][0]) == 5.0 and opt.state_bytes == 0


def test_adam_first_step_moves_each_value_by_lr_against_its_gradient_sign():
    # after one step m̂ = g and v̂ = g², so the update is lr · g / (|g| + eps)
    params = {"w": xp.asarray([1.0, -2.0, 3.0])}
    opt = Adam(("w",), lr=0.1)
    opt.step(params, {"w": xp.asarray([0.5, -4.0, 1e-3])})
    np.testing.assert_allclose(asnumpy(params["w"]), [0.9, -1.9, 2.9], rtol=1e-4)
    assert opt.state_bytes == 2 * 3 * 8


def test_adam_matches_the_papers_update_over_several_steps():
    """Kingma & Ba, Algorithm 1, written out in float64, against the in-place one-scratch update."""
    g = np.random.default_rng(1)
    w0, grads = g.normal(size=(3, 4)), g.normal(size=(5, 3, 4))
    params = {"w": xp.asarray(w0.copy())}
    opt = Adam(lr=0.01)  # trainable=None: every name in the gradients
    w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, grad in enumerate(grads, start=1):
        opt.step(params, {"w": xp.asarray(grad)})
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad**2
        w = w - 0.01 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    np.testing.assert_allclose(asnumpy(params["w"]), w, rtol=1e-12)
    np.testing.assert_allclose(asnumpy(opt.m["w"]), m, rtol=1e-12)
    assert opt.step_count == 5


def test_adam_rejects_nonpositive_learning_rate():
    with pytest.raises(ValueError, match="lr"):
        Adam(("w",), lr=0.0)


def test_accuracy_and_batches():
    assert accuracy(xp.asarray([[0.1, 0.9], [0.8, 0.2]]), xp.asarray([1, 1])) == 0.5
    seen = np.concatenate(list(batches(10, 3, np.random.default_rng(0))))
    assert len(seen) == 9 and len(set(seen.tolist())) == 9
    with pytest.raises(ValueError, match="batch_size"):
        list(batches(10, 11, np.random.default_rng(0)))
