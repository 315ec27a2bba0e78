"""On a GPU too old for a kernel (Colab's T4 is compute capability 7.5), does the launcher refuse in one clear line,
naming the GPU, its capability and what the kernel needs, before any compiler runs? And does the banner say which
lessons' kernels the GPU runs? The GPU is simulated: the backend's selection is replaced, CuPy is never touched."""

import importlib.machinery
import sys
import types

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader


def simulate_gpu(monkeypatch, device: str, capability: tuple[int, int]) -> None:
    selection = backend.Selection("cupy", np, f"simulated {device}", device, capability)
    monkeypatch.setattr(backend, "_selection", selection)
    monkeypatch.setattr(backend, "on_gpu", True)
    # No cached kernel may answer for the simulated GPU (on a real GPU run, earlier tests compiled some).
    monkeypatch.setattr(loader, "_kernel", getattr(loader._kernel, "__wrapped__", loader._kernel))


def compiler_must_not_run(*args, **kwargs):
    raise AssertionError("the capability check must refuse before compiling")


def test_bf16_kernel_on_a_t4_names_gpu_capability_and_need(monkeypatch):
    simulate_gpu(monkeypatch, "Tesla T4", (7, 5))
    monkeypatch.setattr(loader, "_module", compiler_must_not_run)
    with pytest.raises(loader.GPUTooOld) as refused:
        loader.kernel("memory_hierarchy/bf16_gemm.cu", "bf16_wmma")
    message = str(refused.value)
    assert "\n" not in message
    assert "memory_hierarchy/bf16_gemm.cu needs compute capability 8.0 or newer (bf16 tensor-core mma.sync" in message
    assert "this GPU, Tesla T4, has compute capability 7.5" in message
    assert isinstance(refused.value, loader.GPUUnavailable), "lessons that catch GPUUnavailable fall back as before"
    with pytest.raises(loader.GPUTooOld, match="flash_attention.cu needs compute capability 8.0"):
        loader.module("memory_hierarchy/flash_attention.cu")
    with pytest.raises(loader.GPUTooOld, match="littles_law.cu needs compute capability 8.0"):
        loader.kernel("roofline/littles_law.cu", "pointer_chase")


def test_wgmma_needs_exactly_hopper(monkeypatch):
    """sm_90a code runs on compute capability 9.0 only: refused on an L4 (8.9) and on a newer 10.0 alike."""
    monkeypatch.setattr(loader, "_module_for_arch", compiler_must_not_run)
    for device, capability in (("NVIDIA L4", (8, 9)), ("NVIDIA B200", (10, 0))):
        simulate_gpu(monkeypatch, device, capability)
        with pytest.raises(loader.GPUTooOld, match=rf"bf16_gemm.cu for sm_90a needs compute capability 9.0 exactly "
                                                   rf".*this GPU, {device}, has compute capability"):
            loader.kernel("memory_hierarchy/bf16_gemm.cu", "bf16_wgmma", arch="sm_90a")


def test_what_a_gpu_can_run_passes_the_check():
    for capability in ((7, 5), (8, 0), (8, 9), (9, 0)):
        assert backend.kernel_blockers("memory_hierarchy/global.cu", capability) is None
    for capability in ((8, 0), (8, 9), (9, 0)):
        assert backend.kernel_blockers("memory_hierarchy/bf16_gemm.cu", capability) is None
    assert backend.kernel_blockers("memory_hierarchy/bf16_gemm.cu", (9, 0), "sm_90a") is None


def test_no_gpu_keeps_the_old_message(monkeypatch):
    monkeypatch.setattr(backend, "on_gpu", False)
    with pytest.raises(loader.GPUUnavailable, match="needs a CUDA GPU") as refused:
        loader.kernel("memory_hierarchy/bf16_gemm.cu", "bf16_wmma")
    assert not isinstance(refused.value, loader.GPUTooOld)


def test_every_table_entry_is_a_kernel_source():
    assert set(backend.KERNEL_NEEDS) <= set(loader.sources())
    assert {f for f, _, _ in backend.ARCH_SPECIFIC_KERNELS} <= set(loader.sources())
    assert {slug for slug in backend.kernel_support((9, 0))} == {s.split("/")[0] for s in loader.sources()}


def test_banner_says_which_gpu_and_which_lessons_kernels_run(monkeypatch):
    simulate_gpu(monkeypatch, "Tesla T4", (7, 5))
    text = backend.what_gpu_lessons_do()
    lines = text.splitlines()
    assert lines[0].startswith("CuPy is active on Tesla T4")
    assert lines[1] == ("Tesla T4 has compute capability 7.5. Lessons whose kernels all run on it: loops, operators, "
                        "training_memory.")
    blocked = {line.split()[0] for line in lines[3:]}
    assert blocked == {"memory_hierarchy/bf16_gemm.cu", "memory_hierarchy/flash_attention.cu", "moe/grouped_gemm.cu",
                       "roofline/littles_law.cu", "memory_hierarchy/fp8_block_gemm.cu,",
                       "memory_hierarchy/flash_attention_hopper.cu,",  # the sm_90a-only files: "file, what, why"
                       "memory_hierarchy/flash_attention_hopper_backward.cu,"}
    simulate_gpu(monkeypatch, "NVIDIA L4", (8, 9))
    lines = backend.what_gpu_lessons_do().splitlines()
    assert lines[1].endswith("loops, moe, operators, roofline, training_memory.")
    why = ("needs compute capability 9.0 exactly (Hopper's wgmma and TMA, compiled for sm_90a, which runs on compute "
           "capability 9.0 only)")
    assert lines[3:] == [f"  memory_hierarchy/bf16_gemm.cu, step 'wgmma' (bf16_wgmma), {why}",
                         f"  memory_hierarchy/fp8_block_gemm.cu, the FP8 block-scaled GEMM, {why}",
                         f"  memory_hierarchy/flash_attention_hopper.cu, the Hopper attention forward, {why}",
                         f"  memory_hierarchy/flash_attention_hopper_backward.cu, the Hopper attention backward, {why}"]
    simulate_gpu(monkeypatch, "NVIDIA H200", (9, 0))
    lines = backend.what_gpu_lessons_do().splitlines()
    assert len(lines) == 2 and "memory_hierarchy" in lines[1]


def test_probe_reads_the_compute_capability(monkeypatch):
    """A CuPy that answers (faked): the selection carries (7, 5) and the reason says so."""
    cupy = types.ModuleType("cupy")
    device = types.SimpleNamespace(id=0, compute_capability="75")
    cupy.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1,
                                      getDeviceProperties=lambda i: {"name": b"Tesla T4"}),
        Device=lambda *a: device)
    cupy.arange = lambda n, dtype=None: np.arange(n, dtype=np.float32)
    cupy.float32 = np.float32
    cupy.ElementwiseKernel = lambda *a, **k: (lambda x: x * 2)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: importlib.machinery.ModuleSpec("cupy", None))
    monkeypatch.setattr(backend, "_cuda_driver_loads", lambda: None)
    selection = backend.choose("auto")
    assert (selection.name, selection.device, selection.compute_capability) == ("cupy", "Tesla T4", (7, 5))
    assert "compute capability 7.5" in selection.reason
