"""Do the hand-written training pieces match their definitions?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import Adam, accuracy, batches, cross_entropy, softmax


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


def test_adam_first_step_moves_each_value_by_lr_against_its_gradient_sign():
    # after one step m̂ = g and v̂ = g², so the update is lr · g / (|g| + eps)
    params = {"w": xp.asarray([1.0, -2.0, 3.0])}
    opt = Adam(("w",), lr=0.1)
    opt.step(params, {"w": xp.asarray([0.5, -4.0, 1e-3])})
    np.testing.assert_allclose(asnumpy(params["w"]), [0.9, -1.9, 2.9], rtol=1e-4)
    assert opt.state_bytes(params) == 2 * 3 * 8


def test_adam_rejects_nonpositive_learning_rate():
    with pytest.raises(ValueError, match="lr"):
        Adam(("w",), lr=0.0)


def test_accuracy_and_batches():
    assert accuracy(xp.asarray([[0.1, 0.9], [0.8, 0.2]]), xp.asarray([1, 1])) == 0.5
    seen = np.concatenate(list(batches(10, 3, np.random.default_rng(0))))
    assert len(seen) == 9 and len(set(seen.tolist())) == 9
    with pytest.raises(ValueError, match="batch_size"):
        list(batches(10, 11, np.random.default_rng(0)))
