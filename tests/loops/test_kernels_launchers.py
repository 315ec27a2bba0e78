"""Do the loop-transformation CUDA kernels compile, and (on a GPU) match their NumPy references?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.loops import launchers
from mlsys_lab.validation import relative_error

SOURCES = ("loops/matmul.cu", "loops/stencil.cu")
needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason=f"no GPU: {backend.describe()}")


@pytest.mark.parametrize("file_name", SOURCES)
def test_sources_compile_with_nvcc(file_name, tmp_path):
    """Does each .cu file compile for sm_90 (H100/H200) with default and non-default parameters?"""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed: the CUDA toolkit is needed to compile-check kernels")
    path = str(loader.source_path(file_name))
    extra = [[], ["-DBM=128", "-DBN=32", "-DBK=8", "-DTM=8", "-DTN=2", "-DVEC=1", "-DPIPE=0", "-DUNROLL=1"]]
    for defines in extra:
        result = subprocess.run(["nvcc", "-arch=sm_90", "-std=c++17", "--ptx", *defines, path,
                                 "-o", str(tmp_path / "out.ptx")], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr[-2000:]


def test_config_problems_name_the_rule():
    """Does an invalid configuration say which rule it breaks?"""
    assert launchers.TunableConfig().problem() is None
    assert "threads" in launchers.TunableConfig(BM=128, BN=128, TM=2, TN=2).problem()
    assert "shared memory" in launchers.TunableConfig(BM=128, BN=128, BK=32, TM=8, TN=8, PIPE=1).problem()
    assert "UNROLL" in launchers.TunableConfig(BK=8, UNROLL=16).problem()


def test_space_holds_only_valid_configs():
    """Is every configuration of the space valid, and does it have the size the data files record?"""
    space = launchers.tunable_space()
    assert len(space) == 1776
    assert all(c.problem() is None for c in space)
    assert all(32 <= c.threads <= 1024 and c.shared_bytes <= launchers.SHARED_LIMIT_BYTES for c in space)


def test_references_by_hand():
    """Do the NumPy references agree with values worked by hand?"""
    u = np.arange(9, dtype=np.float32).reshape(3, 3)
    assert launchers.jacobi5_reference(u)[1, 1] == pytest.approx(0.25 * (1 + 7 + 3 + 5))
    np.testing.assert_allclose(launchers.affine_relu_reference(np.array([-1.0, 2.0]), 2.0, 1.0), [0.0, 5.0])


@pytest.mark.skipif(backend.on_gpu, reason="checks the message shown on a machine without a GPU")
def test_launchers_say_a_gpu_is_needed():
    """Without a GPU, does a launcher raise a clear GPUUnavailable instead of a traceback wall?"""
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        launchers.matmul_naive(np.ones((4, 4)), np.ones((4, 4)))


@needs_gpu
@pytest.mark.parametrize("variant", launchers.NAIVE_VARIANTS)
def test_naive_matmuls_match_numpy(variant):
    """Does each naive matmul match NumPy on fresh random, non-square, non-multiple shapes?"""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((100, 70)).astype(np.float32), rng.standard_normal((70, 90)).astype(np.float32)
    got = launchers.matmul_naive(backend.xp.asarray(a), backend.xp.asarray(b), variant)
    assert relative_error(got, launchers.matmul_reference(a, b)) < 1e-5


@needs_gpu
@pytest.mark.parametrize("seed", range(6))
def test_tunable_matmul_matches_numpy(seed):
    """Do random valid configurations of the tunable kernel all compute A @ B?"""
    space = launchers.tunable_space()
    config = space[np.random.default_rng(seed).integers(len(space))]
    rng = np.random.default_rng()
    m, n, k = 2 * config.BM, 3 * config.BN, 4 * config.BK
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    got = launchers.matmul_tunable(backend.xp.asarray(a), backend.xp.asarray(b), config)
    assert relative_error(got, launchers.matmul_reference(a, b)) < 1e-5, config


@needs_gpu
def test_stencil_and_fusion_match_numpy():
    """Do both stencil mappings and both fusion variants match their references?"""
    rng = np.random.default_rng()
    u = rng.standard_normal((67, 129)).astype(np.float32)
    for columns_inner in (True, False):
        assert relative_error(launchers.jacobi5(backend.xp.asarray(u), columns_inner),
                                  launchers.jacobi5_reference(u)) < 1e-6
    x = rng.standard_normal(10_001).astype(np.float32)
    for fused in (True, False):
        got = launchers.affine_relu(backend.xp.asarray(x), 1.5, -0.25, fused=fused)
        assert relative_error(got, launchers.affine_relu_reference(x, 1.5, -0.25)) < 1e-6


def test_tunable_rejects_sizes_that_are_not_tile_multiples():
    """Does a size that is not a multiple of the tile give a ValueError naming the dimension?"""
    if not backend.on_gpu:
        pytest.skip("the size check runs after the GPU check")
    a = backend.xp.ones((100, 64), dtype=np.float32)
    with pytest.raises(ValueError, match="M=100"):
        launchers.matmul_tunable(a, backend.xp.ones((64, 64), dtype=np.float32))
