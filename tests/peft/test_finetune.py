"""Does fine-tuning train only what it should, start where the papers say, and report its costs?"""

import numpy as np
import pytest

from mlsys_lab.backend import asnumpy
from mlsys_lab.peft.finetune import (
    finetune,
    identical_start,
    inference_variants,
    make_task,
    task_accuracy,
    train_classifier,
)
from mlsys_lab.peft.models import TinyConfig, add_method, forward, init_base


def test_task_labels_are_the_most_frequent_of_the_tasks_tokens():
    tokens, labels = make_task("shifted", 200, seed=3)
    tokens, labels = asnumpy(tokens), asnumpy(labels)
    counts = np.stack([(tokens == t).sum(axis=1) for t in (4, 5, 6, 7)], axis=1)
    np.testing.assert_array_equal(labels, counts.argmax(axis=1))


@pytest.mark.parametrize(("method", "starts_equal"), [("lora", True), ("adapter", True), ("prefix", False)])
def test_lora_and_adapters_start_as_the_base_model_prefixes_do_not(method, starts_equal):
    base = init_base(TinyConfig())
    data = make_task("shifted", 64)
    assert (identical_start(base, method, data) == 0.0) is starts_equal


def test_training_lowers_the_loss_and_only_trainable_values_move():
    base = init_base(TinyConfig())
    params, trainable = add_method(base, "lora")
    losses = train_classifier(params, trainable, make_task("pretrain", 512), steps=40, lr=3e-2, batch_size=64)
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    for name in base:
        if name not in trainable:
            assert np.array_equal(asnumpy(params[name]), asnumpy(base[name])), name


def test_task_accuracy_counts_rows_whose_largest_logit_is_the_label():
    params, data = init_base(TinyConfig()), make_task("shifted", 256)
    predicted = asnumpy(forward(params, data[0])[0]).argmax(axis=1)
    assert task_accuracy(params, data) == np.mean(predicted == asnumpy(data[1]))


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


def test_nf4_base_holds_nf4_values_and_qlora_training_lowers_the_loss():
    from mlsys_lab.peft.finetune import BASE_MATRICES, nf4_base, qlora_finetune, step_seconds
    from mlsys_lab.peft.nf4 import nf4_dequantize, nf4_quantize

    base = init_base(TinyConfig())
    rounded = nf4_base(base)
    for name in BASE_MATRICES:
        w = asnumpy(rounded[name]).astype(np.float64)
        again = nf4_dequantize(*nf4_quantize(w)).reshape(w.shape)
        np.testing.assert_allclose(again, w, rtol=1e-6)  # already on the grid: quantizing again changes nothing
        assert not np.array_equal(w, asnumpy(base[name]))
    np.testing.assert_array_equal(asnumpy(rounded["emb"]), asnumpy(base["emb"]))
    run = qlora_finetune(base, steps=60)
    assert run.method == "qlora" and np.mean(run.losses[-10:]) < np.mean(run.losses[:10])
    times = step_seconds(base, ("full", "lora"), batch_size=8, rounds=2)
    assert set(times["lora"]) == {"forward", "backward", "update"} and all(v > 0 for v in times["full"].values())
