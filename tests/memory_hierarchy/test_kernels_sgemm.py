"""Does every SGEMM step compile, validate its shapes, and match NumPy on the GPU?"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import sgemm
from mlsys_lab.validation import relative_error

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def all_expressions(candidates: bool) -> list[str]:
    names = [s.expression for s in sgemm.STEPS.values()]
    for values in sgemm.WARPTILE_CANDIDATES if candidates else ():
        for function in ("sgemm_warptile", "sgemm_warptile_db"):
            names.append(sgemm.warptile_step("x", function, "", values).expression)
    return list(dict.fromkeys(names))


@needs_nvcc
def test_every_step_compiles_for_sm90(tmp_path, candidates=False):
    """Do the steps' template instantiations compile for sm_90? (The autotuner's are compiled, checked
    and timed on the GPU by benchmarks/memory_gpu.py; pass candidates=True to compile them here too.)"""
    keep = ",\n".join(f"(void*)&{name}" for name in all_expressions(candidates))
    wrapper = tmp_path / "instantiate.cu"
    wrapper.write_text(f'#include "{loader.source_path(sgemm.SOURCE)}"\nvoid* keep[] = {{\n{keep}}};\n')
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
    assert list(sgemm.STEPS)[:3] == ["naive", "coalesced", "smem"]
    assert sgemm.STEPS["blocktile_2d"].expression == "sgemm_blocktile_2d<128, 128, 8, 8, 8>"
    assert sgemm.STEPS["blocktile_2d"].threads == 256
    assert sgemm.STEPS["blocktile_1d"].threads == 512
    assert sgemm.STEPS["warptile"].threads == 128
    assert sgemm.STEPS["grouped"].expression == "sgemm_warptile_db<128, 128, 8, 64, 64, 2, 8, 8, 128, 8>"


def test_launch_shape_covers_the_output():
    grid, block = sgemm.STEPS["naive"].launch_shape(100, 70)
    assert grid == (4, 3) and block == (32, 32)  # blockIdx.x over rows on purpose
    grid, block = sgemm.STEPS["coalesced"].launch_shape(100, 70)
    assert grid == (3, 4)
    grid, block = sgemm.STEPS["vectorized"].launch_shape(512, 256)
    assert grid == (2, 4) and block == (256,)


def test_shapes_must_be_multiples_of_the_block_tile():
    with pytest.raises(ValueError, match=r"N must be a multiple of 128 .*got 100"):
        sgemm.check_shapes(sgemm.STEPS["vectorized"], 128, 100, 64)
    with pytest.raises(ValueError, match="K must be a multiple of 16"):
        sgemm.check_shapes(sgemm.STEPS["warptile"], 128, 128, 40)
    sgemm.check_shapes(sgemm.STEPS["smem"], 7, 9, 11)  # the bounds-checked steps take any shape


def test_warptile_problems_mirror_the_kernel_asserts():
    assert all(not sgemm.warptile_problems(v) for v in sgemm.WARPTILE_CANDIDATES)
    assert sgemm.warptile_problems((128, 128, 16, 64, 64, 4, 8, 4, 256, 1))  # 8 warps for 4 warp tiles
    assert sgemm.warptile_problems((128, 128, 16, 64, 64, 4, 8, 6, 128, 1))  # TN not a multiple of 4
    too_big = (256, 256, 32, 128, 128, 4, 8, 4, 128, 1)
    assert any("48 KiB" in p for p in sgemm.warptile_problems(too_big, True))


def test_reference_is_the_float64_product_rounded_to_float32():
    g = np.random.default_rng()
    a, b = g.standard_normal((33, 17), dtype=np.float32), g.standard_normal((17, 9), dtype=np.float32)
    ref = sgemm.sgemm_reference(a, b)
    assert ref.dtype == np.float32
    np.testing.assert_array_equal(ref, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32))


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_sgemm_without_gpu_says_why():
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU"):
        sgemm.sgemm(np.ones((128, 128), np.float32), np.ones((128, 128), np.float32), "smem")


def test_unknown_step_is_a_value_error():
    with pytest.raises(ValueError, match="step must be one of"):
        sgemm.sgemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), "fastest")


@needs_gpu
@pytest.mark.parametrize("step", list(sgemm.STEPS))
def test_every_step_matches_numpy_on_fresh_inputs(step):
    g = np.random.default_rng()
    xp = backend.xp
    for m, n, k in ((512, 384, 256), (256, 256, 1024)):
        a, b = g.standard_normal((m, k), dtype=np.float32), g.standard_normal((k, n), dtype=np.float32)
        got = sgemm.sgemm(xp.asarray(a), xp.asarray(b), step)
        assert relative_error(got, sgemm.sgemm_reference(a, b)) < 1e-5


@needs_gpu
def test_bounds_checked_steps_take_odd_shapes():
    g = np.random.default_rng()
    a, b = g.standard_normal((100, 70), dtype=np.float32), g.standard_normal((70, 50), dtype=np.float32)
    for step in ("naive", "coalesced", "smem"):
        got = sgemm.sgemm(backend.xp.asarray(a), backend.xp.asarray(b), step)
        assert relative_error(got, sgemm.sgemm_reference(a, b)) < 1e-5
