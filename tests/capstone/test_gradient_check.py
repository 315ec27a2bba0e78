"""Does the gradient check find the model's backward right in float64, and a wrong backward wrong?"""

import numpy as np

from mlsys_lab.capstone.gradient_check import gradient_check
from mlsys_lab.capstone.model import GPTConfig, ModelOps, course_ops

TINY = GPTConfig(vocab_size=11, context=5, d_model=8, n_heads=2, n_layers=2, dtype="float64")


def test_the_models_backward_agrees_with_central_differences():
    report = gradient_check(TINY, n_coords=150)
    assert report["n_checked"] == 150
    assert report["max_abs_error"] < 1e-7 * max(report["max_gradient"], 1.0)


def test_a_wrong_layer_norm_backward_is_caught():
    ops = course_ops()
    halved = ModelOps(ops.cross_entropy, lambda x, g: 0.5 * ops.layer_norm_backward(x, g), ops.attention_backward)
    report = gradient_check(TINY, n_coords=300, ops=halved)
    assert report["max_abs_error"] > 1e-3 * report["max_gradient"]
    assert np.isfinite(report["max_abs_error"])
