"""The array backend: CuPy when a CUDA GPU is usable, NumPy otherwise.

Lessons write ``from mlsys_lab.backend import xp`` and never import CuPy themselves.

Choice (``MLSYS_LAB_BACKEND=auto``, the default), cheapest test first so that a machine without a
GPU pays almost nothing:

1. is a CuPy package installed (``importlib.util.find_spec``, no import)?
2. does the CUDA driver library (``libcuda``) load?
3. import CuPy and compile and run a tiny kernel. This proves the driver, the runtime and NVRTC all
   work; ``cupy.cuda.is_available()`` alone says only that a device is visible.

``MLSYS_LAB_BACKEND=numpy`` forces NumPy; ``MLSYS_LAB_BACKEND=cupy`` forces CuPy and raises
:class:`BackendUnavailable`, saying which step failed, where it cannot run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
import sys
from dataclasses import dataclass
from types import ModuleType

import numpy

ENV_VAR = "MLSYS_LAB_BACKEND"
CHOICES = ("auto", "numpy", "cupy")
CUPY_PACKAGES = ("cupy",)  # cupy-cuda12x and cupy-cuda13x both install the module ``cupy``.


class BackendUnavailable(RuntimeError):
    """CuPy was asked for but cannot run here; the message says which step failed."""


@dataclass(frozen=True)
class Selection:
    """The outcome of choosing a backend."""

    name: str  # "cupy" or "numpy"
    module: ModuleType
    reason: str  # why this backend: the failed step when NumPy was the fallback
    device: str  # human-readable device name


def _cuda_driver_loads() -> str | None:
    """Return None when libcuda loads, else a short reason."""
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda") or ""]
    if sys.platform == "win32":
        names = ["nvcuda.dll"]
    for lib_name in filter(None, names):
        try:
            ctypes.CDLL(lib_name)
            return None
        except OSError:
            continue
    return "the CUDA driver library (libcuda) is not installed or does not load"


def _probe_cupy() -> tuple[ModuleType | None, str, str]:
    """Try CuPy step by step. Returns (module or None, reason, device name)."""
    if importlib.util.find_spec("cupy") is None:
        return None, "CuPy is not installed (pip install 'mlsys-lab[gpu]' or '[gpu13]')", "CPU"
    driver_problem = _cuda_driver_loads()
    if driver_problem:
        return None, driver_problem, "CPU"
    try:
        import cupy  # noqa: PLC0415  (the only import of CuPy in the package)

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device is visible", "CPU"
        kernel = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 2.0f", "mlsys_lab_probe")
        probe = kernel(cupy.arange(4, dtype=cupy.float32))
        if float(probe.sum()) != 12.0:
            return None, "a test kernel ran on the GPU but returned a wrong result", "CPU"
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        return cupy, "a CUDA device answered and compiled a test kernel", name
    except Exception as exc:  # any failure means: not usable here
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"CuPy is installed but cannot run a kernel: {first_line}", "CPU"


def choose(requested: str | None = None) -> Selection:
    """Choose the backend for ``requested`` ("auto", "numpy" or "cupy"; default: the env var)."""
    requested = (requested or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if requested not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}; got {requested!r}")
    if requested == "numpy":
        return Selection("numpy", numpy, f"forced by {ENV_VAR}=numpy", "CPU")
    module, reason, device = _probe_cupy()
    if module is not None:
        return Selection("cupy", module, reason, device)
    if requested == "cupy":
        raise BackendUnavailable(f"{ENV_VAR}=cupy was requested, but {reason}.")
    return Selection("numpy", numpy, reason, "CPU")


_selection = choose()
xp: ModuleType = _selection.module
name: str = _selection.name
on_gpu: bool = name == "cupy"


def asnumpy(array) -> numpy.ndarray:
    """Return ``array`` as a NumPy array (copies from the GPU when it lives there)."""
    if on_gpu:
        return xp.asnumpy(array)
    return numpy.asarray(array)


def module_of(*arrays) -> ModuleType:
    """The array module that ``arrays`` live in: CuPy when any of them is on the GPU, else NumPy.

    Helpers that take arrays call this instead of using ``xp`` blindly, so a NumPy array stays on the
    host even in a GPU session (an MPI rank's buffers, a test's hand-made input).
    """
    if on_gpu and any(isinstance(a, xp.ndarray) for a in arrays):
        return xp
    return numpy


def sync() -> None:
    """Wait for queued GPU work to finish (a no-op on NumPy)."""
    if on_gpu:
        xp.cuda.get_current_stream().synchronize()


def describe() -> str:
    """One line: the backend, the device, and why it was chosen."""
    return f"backend: {name} · device: {_selection.device} · {_selection.reason}"


def what_gpu_lessons_do() -> str:
    """What the GPU parts of the course will do on this machine, for the start page."""
    if on_gpu:
        return (f"CuPy is active on {_selection.device}: the GPU cells compile and time real CUDA kernels here, "
                "and every array in the lessons lives on this GPU.")
    return ("NumPy is active: every lesson runs here. GPU cells run their NumPy reference instead, and show the "
            "figures recorded on an NVIDIA H200 (mlsys_lab/data/*.json, each with its device and date) beside "
            "what this machine measures.")
