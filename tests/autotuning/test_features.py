"""Do the static features count PTX instructions by class and read ptxas reports right?"""

from __future__ import annotations

import shutil

import pytest

from mlsys_lab.autotuning import features
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
    counts = features.count_ptx_instructions(PTX)
    assert counts["global_loads"] == 1 and counts["shared_loads"] == 1 and counts["fma"] == 2
    assert counts["predicates"] == 1 and counts["branches"] == 1 and counts["barriers"] == 1
    assert counts["global_stores"] == 1
    assert counts["total"] == 10  # ld.param, ld.global, ld.shared, 2 fma, setp, bra, bar, st, ret
    assert features.count_ptx_instructions(PTX, entry="k") == counts


def test_ptxas_log_parsing():
    log = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
           "ptxas info    : Function properties for k\n    0 bytes stack frame, 24 bytes spill stores, "
           "16 bytes spill loads\nptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem\n")
    expected = {"registers": 255, "spill_store_bytes": 24, "spill_load_bytes": 16, "shared_bytes": 16384}
    assert features.ptxas_resources(log) == expected == features.ptxas_resources(log, entry="k")
    with pytest.raises(ValueError, match="entry must name a kernel"):
        features.ptxas_resources(log, entry="other")
    with pytest.raises(ValueError, match="ptxas -v report"):
        features.ptxas_resources("nothing compiled")


def test_static_features_of_a_real_compile():
    """Does compiling the tunable kernel give FMAs in proportion to the per-thread work TM x TN?"""
    if shutil.which("nvcc") is None or shutil.which("ptxas") is None:
        pytest.skip("nvcc/ptxas not installed: static features need the CUDA toolkit")
    path = str(loader.source_path("loops/matmul.cu"))
    small_config = TunableConfig(TM=2, TN=2, BM=32, BN=32, UNROLL=16)
    large_config = TunableConfig(TM=8, TN=8, BM=128, BN=128, BK=8, UNROLL=8)
    small = features.compile_static_features(path, small_config.defines)
    large = features.compile_static_features(path, large_config.defines)
    # the kk loop is fully unrolled (at least TM * TN * BK FMAs; the compiler may duplicate the loop)
    assert small["fma"] >= 2 * 2 * 16 and large["fma"] >= 8 * 8 * 8 and large["fma"] > small["fma"]
    assert large["registers"] > small["registers"]
