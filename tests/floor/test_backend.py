"""Does the backend pick CuPy only when a GPU really answers, and say why otherwise?"""

import importlib.machinery
import subprocess
import sys
import types

import numpy as np
import pytest

from mlsys_lab import backend


def test_forced_numpy_is_numpy_and_says_so(monkeypatch):
    monkeypatch.setattr(backend, "_probe_cupy", lambda: pytest.fail("forced numpy must not probe CuPy"))
    selection = backend.choose("numpy")
    assert selection.name == "numpy" and selection.module is np
    assert "forced" in selection.reason


def test_no_cupy_installed_falls_back_with_reason(monkeypatch):
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: None)
    selection = backend.choose("auto")
    assert selection.name == "numpy"
    assert "CuPy is not installed" in selection.reason


def test_cupy_installed_but_no_driver_falls_back(monkeypatch):
    spec = importlib.machinery.ModuleSpec("cupy", None)
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(backend, "_cuda_driver_loads", lambda: "the CUDA driver library (libcuda) is not installed")
    selection = backend.choose("auto")
    assert selection.name == "numpy"
    assert "libcuda" in selection.reason


def _fake_cupy(device_count: int, kernel_error: Exception | None = None) -> types.ModuleType:
    """A stand-in CuPy whose runtime reports ``device_count`` devices."""
    cupy = types.ModuleType("cupy")
    runtime = types.SimpleNamespace(getDeviceCount=lambda: device_count)
    cupy.cuda = types.SimpleNamespace(runtime=runtime)

    def elementwise_kernel(*args, **kwargs):
        if kernel_error:
            raise kernel_error
        raise AssertionError("the fake has no GPU to run a kernel on")

    cupy.ElementwiseKernel = elementwise_kernel
    return cupy


@pytest.mark.parametrize(
    "device_count, kernel_error, expected",
    [
        (0, None, "no CUDA device is visible"),
        (1, RuntimeError("nvrtc: error: failed to open libnvrtc.so"), "cannot run a kernel: nvrtc"),
    ],
)
def test_cupy_installed_but_gpu_unusable_falls_back(monkeypatch, device_count, kernel_error, expected):
    spec = importlib.machinery.ModuleSpec("cupy", None)
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.setattr(backend, "_cuda_driver_loads", lambda: None)
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(device_count, kernel_error))
    selection = backend.choose("auto")
    assert selection.name == "numpy"
    assert expected in selection.reason


def test_forcing_cupy_without_gpu_raises_and_says_why(monkeypatch):
    monkeypatch.setattr(backend.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(backend.BackendUnavailable, match="MLSYS_LAB_BACKEND=cupy was requested, but CuPy is not"):
        backend.choose("cupy")


def test_unknown_choice_names_the_variable():
    with pytest.raises(ValueError, match="MLSYS_LAB_BACKEND must be one of auto, numpy, cupy; got 'tpu'"):
        backend.choose("tpu")


def test_asnumpy_and_describe_on_numpy():
    if backend.on_gpu:
        pytest.skip("this test is about the NumPy fallback")
    a = backend.asnumpy([1.0, 2.0])
    assert isinstance(a, np.ndarray) and a.tolist() == [1.0, 2.0]
    backend.sync()  # a no-op, must not fail
    assert backend.describe().startswith("backend: numpy · device: CPU · ")


def test_import_is_light_and_never_touches_cupy_when_numpy_is_forced():
    """Importing the package and the backend loads no plotting, widget, JIT or GPU library."""
    code = (
        "import sys, mlsys_lab, mlsys_lab.backend as b; "
        "heavy = [m for m in ('cupy', 'matplotlib', 'ipywidgets', 'numba', 'scipy') if m in sys.modules]; "
        "print(b.name, heavy)"
    )
    env = {"MLSYS_LAB_BACKEND": "numpy", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "numpy []"


def test_module_of_follows_the_arrays():
    assert backend.module_of(np.zeros(3), 1.0) is np
    assert backend.module_of() is np
    if backend.on_gpu:
        assert backend.module_of(np.zeros(3), backend.xp.zeros(3)) is backend.xp


def test_context_lost_knows_every_sticky_cuda_error():
    """Is an out-of-bounds access that lands in another address space (the H200's answer to a far index) sticky?"""
    from mlsys_lab.backend import context_lost

    assert context_lost("CUDARuntimeError: cudaErrorInvalidAddressSpace: operation not supported on global/shared")
    assert context_lost("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered")
    assert not context_lost("CUDARuntimeError: cudaErrorMemoryAllocation: out of memory")
