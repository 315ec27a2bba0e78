"""Autotuning: are the statistics, the surrogate, the searches and the static features right?"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mlsys_lab.autotuning import search as autotune
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.loops.launchers import TunableConfig

PTX = """
.visible .entry k(
	.param .u64 k_param_0
)
{
	.reg .f32 	%f<4>;
	ld.param.u64 	%rd1, [k_param_0];
	ld.global.nc.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd1];
	ld.shared.f32 	%f1, [%r1];
	fma.rn.f32 	%f2, %f1, %f1, %f2;
	fma.rn.f32 	%f3, %f1, %f1, %f3;
	setp.lt.s32 	%p1, %r1, 4;
	@%p1 bra 	$L__BB0_2;
	bar.sync 	0;
$L__BB0_2:
	st.global.f32 	[%rd1], %f2;
	ret;
}
"""


def test_ptx_counts_by_class():
    """Does the counter classify a hand-written PTX body line by line (labels and directives skipped)?"""
    counts = autotune.count_ptx_instructions(PTX)
    assert counts["global_loads"] == 1 and counts["shared_loads"] == 1 and counts["fma"] == 2
    assert counts["predicates"] == 1 and counts["branches"] == 1 and counts["barriers"] == 1
    assert counts["global_stores"] == 1
    assert counts["total"] == 10  # ld.param, ld.global, ld.shared, 2 fma, setp, bra, bar, st, ret
    assert autotune.count_ptx_instructions(PTX, entry="k") == counts


def test_ptxas_log_parsing():
    log = ("ptxas info    : Function properties for k\n    0 bytes stack frame, 24 bytes spill stores, "
           "16 bytes spill loads\nptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem\n")
    expected = {"registers": 255, "spill_store_bytes": 24, "spill_load_bytes": 16, "shared_bytes": 16384}
    assert autotune.ptxas_resources(log) == expected


def test_static_features_of_a_real_compile():
    """Does compiling the tunable kernel give FMAs in proportion to the per-thread work TM x TN?"""
    if shutil.which("nvcc") is None or shutil.which("ptxas") is None:
        pytest.skip("nvcc/ptxas not installed: static features need the CUDA toolkit")
    path = str(loader.source_path("loops/matmul.cu"))
    small_config = TunableConfig(TM=2, TN=2, BM=32, BN=32, UNROLL=16)
    large_config = TunableConfig(TM=8, TN=8, BM=128, BN=128, BK=8, UNROLL=8)
    small = autotune.compile_static_features(path, small_config.defines)
    large = autotune.compile_static_features(path, large_config.defines)
    # the kk loop is fully unrolled (at least TM * TN * BK FMAs; the compiler may duplicate the loop)
    assert small["fma"] >= 2 * 2 * 16 and large["fma"] >= 8 * 8 * 8 and large["fma"] > small["fma"]
    assert large["registers"] > small["registers"]


def test_ranks_and_spearman_by_hand():
    np.testing.assert_allclose(autotune.ranks([10, 20, 20, 5]), [2, 3.5, 3.5, 1])
    assert autotune.spearman([1, 2, 3], [10, 100, 1000]) == pytest.approx(1.0)
    assert autotune.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # Textbook example: d = rank differences (0, 1, -1, 0, 0): rho = 1 - 6*2/(5*24) = 0.9.
    assert autotune.spearman([1, 2, 3, 4, 5], [1, 3, 2, 4, 5]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="equal length"):
        autotune.spearman([1, 2], [1, 2, 3])


def test_gp_interpolates_and_is_unsure_far_away():
    x = np.array([[0.0], [1.0], [2.0]])
    y = np.array([1.0, 3.0, 2.0])
    mean, std = autotune.gp_posterior(x, y, np.array([[1.0], [10.0]]), length_scale=1.0, noise=1e-6)
    assert mean[0] == pytest.approx(3.0, abs=1e-3)
    assert std[1] > 10 * std[0]
    assert mean[1] == pytest.approx(y.mean(), abs=1e-3)  # reverts to the mean far from data


def test_searches_respect_budget_and_never_repeat():
    rng = np.random.default_rng()
    features = rng.standard_normal((60, 3))
    seconds = np.exp(rng.standard_normal(60))
    for strategy in (autotune.grid_search, autotune.random_search, autotune.model_guided_search):
        picked = strategy(features, seconds, 20, int(rng.integers(100)))
        assert len(picked) == 20 and len(set(picked.tolist())) == 20
        assert picked.min() >= 0 and picked.max() < 60
    with pytest.raises(ValueError, match="budget"):
        autotune.random_search(features, seconds, 61)


def test_model_guided_beats_random_on_a_smooth_bowl():
    """On a smooth landscape a surrogate should find the optimum with far fewer measurements."""
    grid = np.array([(i, j) for i in range(15) for j in range(15)], dtype=float)
    seconds = 1.0 + ((grid - [9, 4]) ** 2).sum(1)
    features = autotune.standardize(grid)
    def reach(strategy):
        curves = autotune.search_curves(strategy, features, seconds, 40, 8)
        return autotune.evaluations_to_reach(curves, within=1.0)

    guided, rand = reach(autotune.model_guided_search), reach(autotune.random_search)
    assert np.median(guided) < np.median(rand)


def test_curves_are_monotone_and_reach_counts():
    seconds = np.array([4.0, 3.0, 2.0, 1.0])
    curves = autotune.search_curves(autotune.random_search, np.zeros((4, 1)), seconds, 4, seeds=5)
    assert curves.shape == (5, 4) and np.all(np.diff(curves, axis=1) <= 0) and np.all(curves[:, -1] == 1.0)
    assert autotune.evaluations_to_reach(np.array([[2.0, 1.0], [3.0, 3.0]])).tolist() == [2, 3]


def test_neighbour_jumps_by_hand():
    features = np.array([[0, 0], [1, 0], [1, 1]])
    jumps = autotune.neighbour_jumps(features, np.array([1.0, np.e, np.e]))
    np.testing.assert_allclose(sorted(jumps), [0.0, 1.0])  # (0,1) differ once: |log e| = 1; (1,2): 0


def test_recorded_gpu_space_is_consistent():
    """Do the recorded GPU run and the static features join, with correct results and the device named?"""
    space = autotune.load_gpu_space()
    n = len(space["seconds"])
    assert n >= 100 and space["raw"].shape == (n, 8)
    assert space["static"].shape == (n, len(autotune.STATIC_FEATURES))
    assert "H200" in space["meta"]["device"] and space["meta"]["date"]
    assert np.all(space["seconds"] > 0)
    # the FMA count is a function of the configuration: TM * TN * min(UNROLL, BK) at least
    raw = space["raw"]
    assert np.all(space["static"][:, 4] >= raw[:, 3] * raw[:, 4])
