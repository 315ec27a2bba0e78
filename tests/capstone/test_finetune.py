"""A LoRA fine-tune of the capstone model: is the adapted model the base at B = 0, is the adapters' gradient the
forward's (central differences), does merging give the same logits, do the counts follow lesson 10's accounting,
and does the fine-tune lower the loss of its own held-out text?"""

import numpy as np
import pytest

from mlsys_lab.capstone.finetune import (
    LoraConfig,
    adapter_layout,
    adapters_of,
    finetune_splits,
    init_adapters,
    lora_counts,
    lora_finetune,
    lora_gradient_check,
    lora_held_out_loss,
    merge_adapters,
)
from mlsys_lab.capstone.lora import Adapters
from mlsys_lab.capstone.model import GPTConfig, count_params, gpt_forward, init_theta, loss_and_grad
from mlsys_lab.capstone.train import RunConfig, splits, train
from mlsys_lab.exercises.peft import reference_lora_backward, reference_lora_forward

TINY = GPTConfig(vocab_size=7, context=5, d_model=8, n_heads=2, n_layers=2, dtype="float64")
LORA = LoraConfig(rank=2, alpha=4.0)


def _tokens(seed=0):
    g = np.random.default_rng(seed)
    return g.integers(0, 7, (3, 5)), g.integers(0, 7, (3, 5))


def test_at_b_zero_the_adapted_model_is_the_base_bit_for_bit():
    config = GPTConfig()  # float32, as the notebook runs it
    theta, idx = init_theta(config, 1), np.random.default_rng(0).integers(0, 62, (2, 64))
    adapters = adapters_of(init_adapters(config, LoraConfig()), config, LoraConfig())
    assert all(np.all(b == 0) for b in adapters.b.values()) and all(np.any(a != 0) for a in adapters.a.values())
    assert np.array_equal(gpt_forward(theta, idx, config, adapters)[0], gpt_forward(theta, idx, config)[0])


def test_adapter_gradient_matches_central_differences_on_every_coordinate():
    report = lora_gradient_check(TINY, LORA, n_coords=10_000)
    assert report["n_checked"] == init_adapters(TINY, LORA).size and report["max_gradient"] > 1e-2
    assert report["max_abs_error"] < 1e-8


def test_the_learners_pieces_give_the_courses_gradient():
    """The lesson-10 references stand in for a learner's pieces: the same dA, dB through the model."""
    theta, (idx, targets) = init_theta(TINY, 2), _tokens(2)
    phi = init_adapters(TINY, LORA, 3) + np.random.default_rng(3).normal(0, 0.2, init_adapters(TINY, LORA).size)
    ours = loss_and_grad(theta, idx, targets, TINY, adapters=adapters_of(phi, TINY, LORA))
    theirs = loss_and_grad(theta, idx, targets, TINY, adapters=adapters_of(phi, TINY, LORA, reference_lora_forward,
                                                                           reference_lora_backward))
    assert ours[0] == pytest.approx(theirs[0], abs=1e-14)
    for name, (da, db) in ours[1].items():
        assert np.allclose(da, theirs[1][name][0], atol=1e-14) and np.allclose(db, theirs[1][name][1], atol=1e-14)


def test_merged_weights_give_the_adapted_logits_to_round_off():
    theta, (idx, _) = init_theta(TINY, 4), _tokens(4)
    phi = init_adapters(TINY, LORA, 4) + np.random.default_rng(4).normal(0, 0.3, init_adapters(TINY, LORA).size)
    adapters = adapters_of(phi, TINY, LORA)
    merged = merge_adapters(theta, adapters, TINY)
    adapted = gpt_forward(theta, idx, TINY, adapters)[0]
    assert np.abs(gpt_forward(merged, idx, TINY)[0] - adapted).max() < 1e-12
    assert np.abs(gpt_forward(theta, idx, TINY)[0] - adapted).max() > 1e-3  # the adapters do change the model


def test_counts_follow_lesson_10_and_the_layout():
    config, lora = GPTConfig(), LoraConfig()
    counts = lora_counts(config, lora)
    c = config.d_model
    per_block = lora.rank * ((c + 3 * c) + (c + c) + (c + 4 * c) + (4 * c + c))
    assert counts["lora_params"] == config.n_layers * per_block == init_adapters(config, lora).size == 8192
    assert counts["full_params"] == count_params(config) and counts["lora_adam_bytes"] == 8 * 8192
    assert [name for name, *_ in adapter_layout(config, LoraConfig(targets=("proj",)))] == ["h0.proj", "h1.proj"]


def test_frozen_theta_gets_no_gradient_and_only_adapted_layers_do():
    theta, (idx, targets) = init_theta(TINY, 0), _tokens(0)
    lora = LoraConfig(rank=2, targets=("proj", "out"))
    _, grads = loss_and_grad(theta, idx, targets, TINY, adapters=adapters_of(init_adapters(TINY, lora), TINY, lora))
    assert sorted(grads) == ["h0.out", "h0.proj", "h1.out", "h1.proj"]
    assert all(np.all(db != 0) for _, db in grads.values())  # at B = 0, dB is what moves first


def test_the_finetune_text_is_what_the_base_never_trained_on():
    base_text, held_out = splits()
    train_part, judge_part = finetune_splits()
    assert np.array_equal(np.concatenate([train_part, judge_part]), held_out) and len(judge_part) > 5000


def test_finetune_lowers_the_held_out_loss_of_its_text_and_leaves_theta_alone():
    run = RunConfig(model=GPTConfig(d_model=32, n_heads=2, n_layers=1, context=32), batch_size=8, lr=1e-2)
    base, _ = train(run, 40)
    frozen = base.theta.copy()
    lora = LoraConfig(rank=4)
    state, log = lora_finetune(base.theta, RunConfig(model=run.model, batch_size=8, lr=1e-2, data_seed=1), lora, 40)
    assert np.array_equal(base.theta, frozen) and state.step == 40 and len(log.losses) == 40
    before = lora_held_out_loss(base.theta, run)
    after = lora_held_out_loss(base.theta, run, adapters_of(state.theta, run.model, lora))
    assert after < before - 0.03


def test_bad_adapters_are_refused_by_name():
    a, b = {"h0.proj": np.ones((8, 2))}, {"h0.proj": np.zeros((2, 8))}
    with pytest.raises(ValueError, match="adapters must adapt linears"):
        gpt_forward(init_theta(TINY), _tokens()[0], TINY, Adapters({"h0.wte": a["h0.proj"]}, {"h0.wte": b["h0.proj"]},
                                                                   1.0))
    with pytest.raises(ValueError, match="adapters must adapt"):
        gpt_forward(init_theta(TINY), _tokens()[0], TINY, Adapters({"h0.fc": np.ones((8, 2))},
                                                                   {"h0.fc": np.zeros((2, 8))}, 1.0))
    with pytest.raises(ValueError, match="b\\['h0.proj'\\] must have r = 3"):
        Adapters({"h0.proj": np.ones((8, 3))}, b, 1.0)
    with pytest.raises(ValueError, match="lora.rank must be at most"):
        adapter_layout(TINY, LoraConfig(rank=9))
    with pytest.raises(ValueError, match="config.dtype must be float64"):
        lora_gradient_check(GPTConfig(), LORA)
