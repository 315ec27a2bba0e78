"""Are the tiny transformer's hand-written gradients right, and do LoRA factors merge into the weights?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import cross_entropy
from mlsys_lab.peft.models import METHODS, TinyConfig, add_method, backward, forward, init_base, merge_lora

SMALL = TinyConfig(vocab=8, seq_len=5, d_model=6, d_hidden=7, n_classes=3)


def _loss(params, tokens, labels, scale):
    return cross_entropy(forward(params, tokens, scale)[0], labels)[0]


@pytest.mark.parametrize("method", METHODS)
def test_gradients_match_finite_differences(method):
    rng = np.random.default_rng(0)
    base = {k: v.astype(xp.float64) for k, v in init_base(SMALL).items()}
    params, trainable = add_method(base, method, rank=2, prefix_len=3)
    params = {k: v.astype(xp.float64) for k, v in params.items()}
    for name in params:  # move the zero-initialised factors off zero so their gradients are exercised
        if name.startswith(("lora_b", "ad_up")):
            params[name] = xp.asarray(rng.normal(0, 0.3, size=params[name].shape))
    tokens, labels = xp.asarray(rng.integers(0, 8, size=(4, 5))), xp.asarray(rng.integers(0, 3, size=4))
    logits, cache = forward(params, tokens, 0.7)
    grads = backward(params, cache, cross_entropy(logits, labels)[1], trainable, 0.7)
    assert set(grads) == set(trainable)
    for name in trainable:
        for _ in range(3):
            index = tuple(int(rng.integers(0, s)) for s in params[name].shape)
            old = float(params[name][index])
            params[name][index] = old + 1e-6
            plus = _loss(params, tokens, labels, 0.7)
            params[name][index] = old - 1e-6
            minus = _loss(params, tokens, labels, 0.7)
            params[name][index] = old
            numeric = (plus - minus) / 2e-6
            assert float(grads[name][index]) == pytest.approx(numeric, rel=1e-4, abs=1e-8), name


def test_merging_lora_gives_the_same_outputs():
    rng = np.random.default_rng(3)
    params, _ = add_method(init_base(TinyConfig()), "lora", rank=4, lora_targets=("q", "k", "v", "o"))
    for t in "qkvo":
        shape = params[f"lora_b_{t}"].shape
        params[f"lora_b_{t}"] = xp.asarray(rng.normal(0, 0.2, size=shape).astype(np.float32))
    tokens = xp.asarray(rng.integers(0, TinyConfig().vocab, size=(32, TinyConfig().seq_len)))
    before = asnumpy(forward(params, tokens, 2.0)[0])
    merged = merge_lora(params, scale=2.0)
    assert not any(k.startswith("lora_") for k in merged)
    np.testing.assert_allclose(asnumpy(forward(merged, tokens)[0]), before, rtol=1e-4, atol=1e-4)


def test_bad_method_and_rank_are_named():
    base = init_base(TinyConfig())
    with pytest.raises(ValueError, match="method"):
        add_method(base, "bitfit")
    with pytest.raises(ValueError, match="rank"):
        add_method(base, "lora", rank=64)


def test_step_flops_dense_step_is_three_forwards_and_frozen_weights_skip_dw():
    from mlsys_lab.peft.models import step_flops

    config = TinyConfig(d_model=128, d_hidden=512, seq_len=32)
    full, lora, head = (step_flops(config, m, 16) for m in ("full", "lora", "head"))
    assert sum(full.values()) / full["forward"] == pytest.approx(3.0, rel=0.05)
    assert lora["backward: dW"] < 0.02 * full["backward: dW"]
    assert head["backward: dX"] == 0
    # by hand: the MLP's two weight matmuls, 2·N·d·h each, forward
    n = 16 * 32
    assert full["forward"] > 2 * 2 * n * 128 * 512


def test_frozen_weights_get_no_gradient_computed():
    base = init_base(SMALL)
    params, trainable = add_method(base, "lora", rank=2)
    tokens = xp.asarray(np.random.default_rng(0).integers(0, 8, size=(4, 5)))
    logits, cache = forward(params, tokens)
    grads = backward(params, cache, cross_entropy(logits, xp.zeros(4, int))[1], trainable)
    assert set(grads) == set(trainable) and "w1" not in grads
