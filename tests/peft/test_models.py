"""Are the tiny transformer's hand-written gradients right; do the methods behave as the papers say?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.nn import cross_entropy
from mlsys_lab.peft.finetune import finetune, identical_start, inference_variants, make_task, train
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


@pytest.mark.parametrize(("method", "starts_equal"), [("lora", True), ("adapter", True), ("prefix", False)])
def test_lora_and_adapters_start_as_the_base_model_prefixes_do_not(method, starts_equal):
    base = init_base(TinyConfig())
    data = make_task("shifted", 64)
    assert (identical_start(base, method, data) == 0.0) is starts_equal


def test_merging_lora_gives_the_same_outputs():
    rng = np.random.default_rng(3)
    params, _ = add_method(init_base(TinyConfig()), "lora", rank=4, lora_targets=("q", "k", "v", "o"))
    for t in "qkvo":
        shape = params[f"lora_b_{t}"].shape
        params[f"lora_b_{t}"] = xp.asarray(rng.normal(0, 0.2, size=shape).astype(np.float32))
    tokens = make_task("shifted", 32)[0]
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


def test_training_lowers_the_loss_and_only_trainable_values_move():
    base = init_base(TinyConfig())
    params, trainable = add_method(base, "lora")
    losses = train(params, trainable, make_task("pretrain", 512), steps=40, lr=3e-2, batch_size=64)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    for name in base:
        if name not in trainable:
            assert np.array_equal(asnumpy(params[name]), asnumpy(base[name])), name


def test_finetune_reports_counts_and_optimizer_memory():
    run = finetune(init_base(TinyConfig()), "lora", steps=5, rank=2)
    d = TinyConfig().d_model
    assert run.trainable_params == 2 * 2 * (d + d) + d * 4 + 4        # A and B for q, v, plus the head
    assert run.optimizer_bytes == 2 * 4 * run.trainable_params          # two fp32 moments
    assert run.step_seconds > 0 and len(run.losses) == 5


def test_inference_variants_compute_the_same_or_intended_function():
    fns = inference_variants(d_model=64, n_tokens=4, rank=4)
    merged, unmerged = asnumpy(fns["merged"]()), asnumpy(fns["lora unmerged"]())
    np.testing.assert_allclose(merged, unmerged, rtol=1e-4, atol=1e-4)
    assert fns["adapter"]().shape == (4, 64)
