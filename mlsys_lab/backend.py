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
import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
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
    compute_capability: tuple[int, int] | None = None  # (major, minor) of the GPU that answered; None on NumPy

    def __post_init__(self) -> None:
        for field_name in ("name", "reason", "device"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"{field_name} must be a non-empty str; got {value!r:.40}")
        cc = self.compute_capability
        if cc is not None and not (isinstance(cc, tuple) and len(cc) == 2
                                   and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cc)):
            raise TypeError(f"compute_capability must be None or a (major, minor) tuple of ints; got {cc!r:.40}")


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


def _probe_cupy() -> tuple[ModuleType | None, str, str, tuple[int, int] | None]:
    """Try CuPy step by step. Returns (module or None, reason, device name, compute capability or None)."""
    if importlib.util.find_spec("cupy") is None:
        return None, "CuPy is not installed (pip install 'mlsys-lab[gpu]' or '[gpu13]')", "CPU", None
    driver_problem = _cuda_driver_loads()
    if driver_problem:
        return None, driver_problem, "CPU", None
    try:
        import cupy  # noqa: PLC0415  (the only import of CuPy in the package)

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "no CUDA device is visible", "CPU", None
        kernel = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 2.0f", "mlsys_lab_probe")
        probe = kernel(cupy.arange(4, dtype=cupy.float32))
        if float(probe.sum()) != 12.0:
            return None, "a test kernel ran on the GPU but returned a wrong result", "CPU", None
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        digits = str(cupy.cuda.Device().compute_capability)  # "75" on a T4, "90" on an H200
        capability = (int(digits[:-1]), int(digits[-1]))
        return (cupy, f"a CUDA device (compute capability {capability[0]}.{capability[1]}) answered and compiled a "
                "test kernel", name, capability)
    except Exception as exc:  # any failure means: not usable here
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return None, f"CuPy is installed but cannot run a kernel: {first_line}", "CPU", None


def choose(requested: str | None = None) -> Selection:
    """Choose the backend for ``requested`` ("auto", "numpy" or "cupy"; default: the env var)."""
    if requested is not None and not isinstance(requested, str):
        raise TypeError(f"requested must be None or one of {', '.join(CHOICES)}; got {requested!r:.40}")
    given = " (given as the argument requested)" if requested else ""  # where the bad value came from
    requested = (requested or os.environ.get(ENV_VAR) or "auto").strip().lower()
    if requested not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}; got {requested!r}{given}")
    if requested == "numpy":
        return Selection("numpy", numpy, f"forced by {ENV_VAR}=numpy", "CPU")
    module, reason, device, capability = _probe_cupy()
    if module is not None:
        return Selection("cupy", module, reason, device, capability)
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


def to_device(values) -> tuple:
    """The NumPy arrays among ``values`` copied to the array module's device (the GPU under CuPy); the rest as
    they are: the arguments of a launcher, from NumPy inputs."""
    if not isinstance(values, (tuple, list)):
        raise TypeError(f"values must be a tuple or list of arguments; got {type(values).__name__}")
    return tuple(xp.asarray(v) if isinstance(v, numpy.ndarray) else v for v in values)


def to_host(value):
    """A device array copied back as a NumPy array, a tuple or list of them item by item (a kernel that returns
    a loss and its gradient); anything else as it is."""
    if isinstance(value, (tuple, list)):
        return type(value)(to_host(item) for item in value)
    return asnumpy(value) if hasattr(value, "__cuda_array_interface__") else value


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


# CUDA errors after which the process's context is unusable: every later call fails the same way until the process
# ends (CUDA runtime API, "sticky" errors). Named as CuPy reports them (runtime and driver spellings).
STICKY_CUDA_ERRORS = ("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS", "illegal memory access",
                      "cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address",
                      "cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure",
                      "cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "cudaErrorHardwareStackError",
                      "CUDA_ERROR_HARDWARE_STACK_ERROR", "cudaErrorAssert", "CUDA_ERROR_ASSERT",
                      # an address outside every allocation, in another address space (seen on the H200 for an
                      # index a gigabyte past the end of an array), and a jump to a bad program counter
                      "cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE",
                      "cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC", "cudaErrorLaunchTimeout",
                      "CUDA_ERROR_LAUNCH_TIMEOUT")


def context_lost(message: str) -> bool:
    """Does this error message report a sticky CUDA error (:data:`STICKY_CUDA_ERRORS`), one that leaves the
    process's GPU context unusable (an out-of-bounds access in a kernel, most often)?"""
    if not isinstance(message, str):
        raise TypeError(f"message must be an error message (str); got {type(message).__name__}")
    return any(name in message for name in STICKY_CUDA_ERRORS)


def describe() -> str:
    """One line: the backend, the device, and why it was chosen."""
    return f"backend: {name} · device: {_selection.device} · {_selection.reason}"


def device_name() -> str:
    """The name of the device the backend runs on ("NVIDIA H200", "Tesla T4"; "CPU" on NumPy)."""
    return _selection.device


@functools.lru_cache(maxsize=None)
def sm_count() -> int | None:
    """Streaming multiprocessors of the GPU the backend runs on (132 on an H100 or H200, 40 on a T4); None on NumPy.
    Asked of the driver once: the launchers that size their grids to the SMs call it on every launch."""
    return int(xp.cuda.Device().attributes["MultiProcessorCount"]) if on_gpu else None


def compute_capability() -> tuple[int, int] | None:
    """(major, minor) of the GPU the backend runs on, e.g. (7, 5) on a T4; None on NumPy."""
    return _selection.compute_capability


# What a kernel source needs beyond what every GPU the course compiles for has (sm_75 up: Turing, Colab's T4),
# and the first compute capability that has it (PTX ISA: mma.sync with .bf16 m16n8k16 and cp.async from sm_80).
# Kept here, beside the banner that reports it (the floor imports no kernels); kernels.loader enforces it, and
# tests/course/test_packaging.py proves every entry with ptxas: each file assembles exactly where it says.
KERNEL_NEEDS: dict[str, tuple[tuple[int, int], str]] = {
    "memory_hierarchy/bf16_gemm.cu": ((8, 0), "bf16 tensor-core mma.sync and cp.async"),
    "memory_hierarchy/flash_attention.cu": ((8, 0), "bf16 tensor-core mma.sync and cp.async"),
    "moe/grouped_gemm.cu": ((8, 0), "bf16 tensor-core mma.sync (m16n8k16)"),
    "roofline/littles_law.cu": ((8, 0), "mma.sync m16n8k16 for its tensor-core chains"),
}
# Architecture-specific targets a launcher may ask for: "a" code runs on that exact compute capability only.
ARCH_SPECIFIC: dict[str, tuple[tuple[int, int], str]] = {
    "sm_90a": ((9, 0), "Hopper's wgmma and TMA, compiled for sm_90a, which runs on compute capability 9.0 only"),
}
# The kernels built for an architecture-specific target: (file, which kernel of it, target).
ARCH_SPECIFIC_KERNELS = (("memory_hierarchy/bf16_gemm.cu", "step 'wgmma' (bf16_wgmma)", "sm_90a"),
                         ("memory_hierarchy/fp8_block_gemm.cu", "the FP8 block-scaled GEMM", "sm_90a"),
                         ("memory_hierarchy/flash_attention_hopper.cu", "the Hopper attention forward", "sm_90a"),
                         ("memory_hierarchy/flash_attention_hopper_backward.cu", "the Hopper attention backward",
                          "sm_90a"))
KERNEL_DIR = Path(__file__).resolve().parent / "kernels"


def _version(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


def _check_capability(capability) -> None:
    if not (isinstance(capability, tuple) and len(capability) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 100 for v in capability)):
        raise TypeError(f"capability must be a (major, minor) pair of ints such as (9, 0); got {capability!r:.40}")


def kernel_blockers(file_name: str, capability: tuple[int, int], arch: str | None = None) -> str | None:
    """Why a GPU of ``capability`` cannot run ``file_name`` ("<slug>/<name>.cu") built for ``arch``; None if it can."""
    if not isinstance(file_name, str):
        raise TypeError(f"file_name must be a str such as 'memory_hierarchy/sgemm.cu'; got {file_name!r:.40}")
    if arch is not None and not isinstance(arch, str):
        raise TypeError(f"arch must be None or an architecture name (str) such as 'sm_90a'; got {arch!r:.40}")
    _check_capability(capability)
    if arch in ARCH_SPECIFIC:
        exact, what = ARCH_SPECIFIC[arch]
        if capability != exact:
            return f"needs compute capability {_version(exact)} exactly ({what})"
    if file_name in KERNEL_NEEDS:
        least, what = KERNEL_NEEDS[file_name]
        if capability < least:
            return f"needs compute capability {_version(least)} or newer ({what})"
    return None


def kernel_support(capability: tuple[int, int]) -> dict[str, dict[str, str | None]]:
    """For each lesson with kernels: {slug: {file: None when it runs on ``capability``, else why not}}."""
    _check_capability(capability)
    support: dict[str, dict[str, str | None]] = {}
    for path in sorted(KERNEL_DIR.glob("*/*.cu")):
        file_name = path.relative_to(KERNEL_DIR).as_posix()
        support.setdefault(path.parent.name, {})[file_name] = kernel_blockers(file_name, capability)
    return support


def kernels_banner(device: str, capability: tuple[int, int]) -> str:
    """Which lessons' kernels a GPU runs: 'all' per lesson, or the files it cannot run and what they need."""
    if not isinstance(device, str):
        raise TypeError(f"device must be the GPU's name (str); got {device!r:.40}")
    _check_capability(capability)
    support = kernel_support(capability)
    blocked = [f"  {file_name} {why}" for files in support.values() for file_name, why in files.items() if why]
    partly = set()
    for file_name, part, arch in ARCH_SPECIFIC_KERNELS:
        why = kernel_blockers(file_name, capability, arch)
        if why and not support[file_name.split("/")[0]][file_name]:
            blocked.append(f"  {file_name}, {part}, {why}")
            partly.add(file_name.split("/")[0])
    full = [slug for slug, files in support.items() if not any(files.values()) and slug not in partly]
    lines = [f"{device} has compute capability {_version(capability)}. Lessons whose kernels all run on it: "
             + (", ".join(full) if full else "none") + "."]
    if blocked:
        lines += ["Not on this GPU (their launchers raise GPUUnavailable with the reason; the NumPy references and "
                  "the figures recorded in mlsys_lab/data/ stand in):", *blocked]
    return "\n".join(lines)


def what_gpu_lessons_do() -> str:
    """What the GPU parts of the course will do on this machine, for the start page."""
    if on_gpu:
        text = (f"CuPy is active on {_selection.device}: the GPU cells compile and time real CUDA kernels here, "
                "and every array in the lessons lives on this GPU.")
        if _selection.compute_capability is not None:
            text += "\n" + kernels_banner(_selection.device, _selection.compute_capability)
        return text
    return ("NumPy is active: every lesson runs here. GPU cells run their NumPy reference instead, and show the "
            "figures recorded on an NVIDIA H200 (mlsys_lab/data/*.json, each with its device and date) beside "
            "what this machine measures.")
