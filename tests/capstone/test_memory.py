"""Per-rank memory: the model of :mod:`mlsys_lab.capstone.memory` against the arrays, and against what the ranks
measure with tracemalloc (``run_data_parallel(..., measure_memory=True)``)."""

import numpy as np
import pytest

from mlsys_lab.capstone.launch import run_data_parallel
from mlsys_lab.capstone.memory import rank_memory_model, rank_state_bytes, step_activation_bytes
from mlsys_lab.capstone.model import GPTConfig, count_params, gpt_forward, init_theta
from mlsys_lab.capstone.train import RunConfig, fresh_run
from mlsys_lab.capstone.zero import slice_sizes
from mlsys_lab.mpi import find_mpiexec
from mlsys_lab.parallelism.zero import zero_memory_breakdown

SMALL = GPTConfig(d_model=32, n_heads=2, n_layers=2, context=32)
CONFIG = RunConfig(model=SMALL, batch_size=8, lr=1e-2)
# The measured peak over the model's state + activations on CONFIG, 2 ranks: 1.245 (data parallel), 1.271
# (ZeRO-1). The excess is NumPy's temporaries at the peak, which the model leaves out: the attention backward's
# B·H·T·T products (dP, dP ⊙ P, dS) and the head's cross-entropy. A config whose parameters dwarf its activations
# goes higher on the data-parallel path (the exercise's all-reduce interface packs a buffer per rank: ~3× with 3
# ranks of a 4-position model), which is why the band is stated for this config.
BAND = (1.0, 1.5)

needs_mpi = pytest.mark.skipif(find_mpiexec() is None, reason="no mpiexec (pip install mpich mpi4py)")


def _arrays(obj):
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _arrays(item)


def _owner(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):  # q, k, v are views of one qkv buffer
        a = a.base
    return a


def test_state_model_is_the_arrays_nbytes_16_bytes_a_parameter_in_float32():
    state = fresh_run(CONFIG)
    terms = rank_state_bytes(SMALL)
    assert terms["state"] == 4 * state.theta.nbytes == 16 * count_params(SMALL)
    assert (terms["theta"], terms["gradient"], terms["adam_m"], terms["adam_v"]) == (
        state.theta.nbytes, np.zeros_like(state.theta).nbytes, state.m.nbytes, state.v.nbytes)
    f64 = GPTConfig(**{**SMALL.__dict__, "dtype": "float64"})
    assert rank_state_bytes(f64)["state"] == 32 * count_params(f64)


def test_zero1_moments_per_rank_are_a_pth_of_the_data_parallel_ranks():
    n, p = count_params(SMALL), 3
    dp = rank_state_bytes(SMALL, p, 0)
    shards = [rank_state_bytes(SMALL, p, r, zero1=True) for r in range(p)]
    moments = [s["adam_m"] + s["adam_v"] for s in shards]
    assert sum(moments) == dp["adam_m"] + dp["adam_v"]  # 1/p each, up to one parameter of array_split's slices
    assert max(moments) - min(moments) <= 2 * 4
    assert np.mean(moments) == pytest.approx(zero_memory_breakdown(n, p, 1, 4, 8)["optimizer"])  # lesson 08's K·Ψ/N
    assert all(s["theta"] == dp["theta"] and s["gradient"] == dp["gradient"] for s in shards)
    assert slice_sizes(n, p) == [len(s) for s in np.array_split(np.arange(n), p)]


def test_activation_model_counts_the_caches_the_forward_keeps():
    rows = 3
    _, cache = gpt_forward(init_theta(SMALL), np.zeros((rows, SMALL.context), dtype=np.int64), SMALL)
    owners = {id(_owner(a)): _owner(a) for a in _arrays(cache)}
    terms = step_activation_bytes(SMALL, rows)
    head = ("final_x", "lnf_out_xhat", "logits", "dlogits", "activations")
    assert sum(a.nbytes for a in owners.values()) == sum(v for k, v in terms.items() if k not in head)
    tokens, c, t = rows * SMALL.context, SMALL.d_model, SMALL.context
    per_layer = 18 * c + SMALL.n_heads * t  # values per token: 18·C, and H·T attention probabilities
    assert terms["activations"] == 4 * tokens * (SMALL.n_layers * per_layer + 3 * c + 2 * SMALL.vocab_size)


def test_memory_model_refuses_bad_arguments():
    with pytest.raises(ValueError, match="rank"):
        rank_state_bytes(SMALL, 2, 2)
    with pytest.raises(ValueError, match="batch_rows"):
        step_activation_bytes(SMALL, 0)
    with pytest.raises(ValueError, match="n_ranks"):
        rank_memory_model(SMALL, 2, 3)


@needs_mpi
def test_measured_memory_per_rank_matches_the_model(piece_store):
    plain = run_data_parallel(CONFIG, 3, n_ranks=2)
    assert plain["peak_step_bytes"] is None and plain["state_bytes"] is None  # not measured unless asked
    reports = {z: run_data_parallel(CONFIG, 3, n_ranks=2, zero1=z, measure_memory=True) for z in (False, True)}
    for zero1, report in reports.items():
        models = [rank_memory_model(SMALL, CONFIG.batch_size, 2, r, zero1) for r in range(2)]
        assert report["state_bytes"] == [m["state"] for m in models]  # exact: the arrays' nbytes
        for peak, model in zip(report["peak_step_bytes"], models, strict=True):
            assert BAND[0] * model["total"] <= peak <= BAND[1] * model["total"], (zero1, peak, model)
        assert report["steps"] == 3 and report["allreduce_calls"] == (0 if zero1 else 3)  # the loop's only
    dp, zero = reports[False]["optimizer_state_bytes"], reports[True]["optimizer_state_bytes"]
    assert [2 * z for z in zero] == dp
    assert np.array_equal(reports[False]["theta"], plain["theta"])  # the measured step trains nothing
