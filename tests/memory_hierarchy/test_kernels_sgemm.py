"""Does every SGEMM step compile, validate its shapes, and match NumPy on the GPU?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import sgemm as matmul

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def all_expressions(candidates: bool) -> list[str]:
    names = [s.expression for s in matmul.STEPS.values()]
    for values in matmul.WARPTILE_CANDIDATES if candidates else ():
        for function in ("sgemm_warptile", "sgemm_warptile_db"):
            names.append(matmul.warptile_step("x", function, "", values).expression)
    return list(dict.fromkeys(names))


@needs_nvcc
def test_every_step_compiles_for_sm90(tmp_path, candidates=False):
    """Do the steps' template instantiations compile for sm_90? (The autotuner's are compiled, checked
    and timed on the GPU by benchmarks/memory_gpu.py; pass candidates=True to compile them here too.)"""
    keep = ",\n".join(f"(void*)&{name}" for name in all_expressions(candidates))
    wrapper = tmp_path / "instantiate.cu"
    wrapper.write_text(f'#include "{loader.source_path(matmul.SOURCE)}"\nvoid* keep[] = {{\n{keep}}};\n')
    done = subprocess.run(
        ["nvcc", "-arch=sm_90", "-std=c++17", "--ptx", str(wrapper), "-o", str(tmp_path / "x.ptx")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ptx = (tmp_path / "x.ptx").read_text()
    assert ptx.count(".entry") == len(all_expressions(candidates))


def test_steps_are_in_the_order_of_the_lesson():
    assert list(matmul.STEPS)[:3] == ["naive", "coalesced", "smem"]
    assert matmul.STEPS["blocktile_2d"].expression == "sgemm_blocktile_2d<128, 128, 8, 8, 8>"
    assert matmul.STEPS["blocktile_2d"].threads == 256
    assert matmul.STEPS["blocktile_1d"].threads == 512
    assert matmul.STEPS["warptile"].threads == 128
    assert matmul.STEPS["grouped"].expression == "sgemm_warptile_db<128, 128, 8, 64, 64, 2, 8, 8, 128, 8>"


def test_launch_shape_covers_the_output():
    grid, block = matmul.STEPS["naive"].launch_shape(100, 70)
    assert grid == (4, 3) and block == (32, 32)  # blockIdx.x over rows on purpose
    grid, block = matmul.STEPS["coalesced"].launch_shape(100, 70)
    assert grid == (3, 4)
    grid, block = matmul.STEPS["vectorized"].launch_shape(512, 256)
    assert grid == (2, 4) and block == (256,)


def test_shapes_must_be_multiples_of_the_block_tile():
    with pytest.raises(ValueError, match=r"N must be a multiple of 128 .*got 100"):
        matmul.check_shapes(matmul.STEPS["vectorized"], 128, 100, 64)
    with pytest.raises(ValueError, match="K must be a multiple of 16"):
        matmul.check_shapes(matmul.STEPS["warptile"], 128, 128, 40)
    matmul.check_shapes(matmul.STEPS["smem"], 7, 9, 11)  # the bounds-checked steps take any shape


def test_warptile_problems_mirror_the_kernel_asserts():
    assert all(not matmul.warptile_problems(v) for v in matmul.WARPTILE_CANDIDATES)
    assert matmul.warptile_problems((128, 128, 16, 64, 64, 4, 8, 4, 256, 1))  # 8 warps for 4 warp tiles
    assert matmul.warptile_problems((128, 128, 16, 64, 64, 4, 8, 6, 128, 1))  # TN not a multiple of 4
    too_big = (256, 256, 32, 128, 128, 4, 8, 4, 128, 1)
    assert any("48 KiB" in p for p in matmul.warptile_problems(too_big, True))


def test_reference_and_relative_error():
    g = np.random.default_rng()
    a, b = g.standard_normal((33, 17), dtype=np.float32), g.standard_normal((17, 9), dtype=np.float32)
    ref = matmul.sgemm_reference(a, b)
    np.testing.assert_allclose(ref, a @ b, rtol=1e-4, atol=1e-4)
    assert matmul.relative_error(ref, ref) == 0.0
    assert matmul.relative_error(2 * ref, ref) == pytest.approx(1.0)


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_sgemm_without_gpu_says_why():
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        matmul.sgemm(np.ones((128, 128), np.float32), np.ones((128, 128), np.float32), "smem")


def test_unknown_step_is_a_value_error():
    with pytest.raises(ValueError, match="step must be one of"):
        matmul.sgemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), "fastest")


@needs_gpu
@pytest.mark.parametrize("step", list(matmul.STEPS))
def test_every_step_matches_numpy_on_fresh_inputs(step):
    g = np.random.default_rng()
    xp = backend.xp
    for m, n, k in ((512, 384, 256), (256, 256, 1024)):
        a, b = g.standard_normal((m, k), dtype=np.float32), g.standard_normal((k, n), dtype=np.float32)
        got = matmul.sgemm(xp.asarray(a), xp.asarray(b), step)
        assert matmul.relative_error(got, matmul.sgemm_reference(a, b)) < 1e-5


@needs_gpu
def test_bounds_checked_steps_take_odd_shapes():
    g = np.random.default_rng()
    a, b = g.standard_normal((100, 70), dtype=np.float32), g.standard_normal((70, 50), dtype=np.float32)
    for step in ("naive", "coalesced", "smem"):
        got = matmul.sgemm(backend.xp.asarray(a), backend.xp.asarray(b), step)
        assert matmul.relative_error(got, matmul.sgemm_reference(a, b)) < 1e-5
