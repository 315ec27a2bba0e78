"""Compile the ``.cu`` files of ``kernels/<slug>/`` with ``cupy.RawModule``, once per process.

    from mlsys_lab.kernels.loader import kernel
    copy = kernel("memory_hierarchy/global.cu", "copy_float4")      # a cupy.RawKernel
    add((blocks,), (threads,), (x, y, n))

Kernels are declared ``extern "C"`` so that their names are not mangled. Compile-time constants
(tile sizes, unroll factors) come in as ``defines`` and become ``-D`` options: each distinct set is
compiled once and cached. CuPy is reached only through :data:`mlsys_lab.backend.xp`; on a machine
without a usable GPU every entry point raises :class:`GPUUnavailable` with the reason, so a lesson
can fall back to its NumPy reference.

``kernel()`` is itself cached per (file, name, options): a launcher called in a loop pays a dictionary
lookup, not a file-system scan and a module lookup. ``arch="sm_90a"`` compiles with NVRTC directly for an
architecture-specific target (Hopper's ``wgmma``, ``setmaxnreg``), which ``cupy.RawModule`` does not choose.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from mlsys_lab import backend

KERNEL_DIR = Path(__file__).resolve().parent
DEFAULT_OPTIONS = ("-std=c++17",)


class GPUUnavailable(RuntimeError):
    """A CUDA kernel was asked for on a machine where the backend is NumPy."""


class GPUTooOld(GPUUnavailable):
    """The GPU answered, but lacks what the kernel is written with (a compute capability too old, or not the one an
    architecture-specific build runs on): one clear line instead of the compiler's error log."""


def require_gpu(what: str = "this kernel") -> None:
    """Raise :class:`GPUUnavailable`, saying why, unless the CuPy backend is active."""
    if not backend.on_gpu:
        raise GPUUnavailable(f"{what} needs a CUDA GPU, but {backend.describe()}. "
                             "Use the NumPy reference, or the figures recorded on a GPU in mlsys_lab/data/.")


def require_capability(file_name: str, arch: str | None = None) -> None:
    """Raise :class:`GPUTooOld` when this GPU cannot run ``file_name`` built for ``arch`` (``backend.KERNEL_NEEDS``)."""
    capability = backend.compute_capability()
    if capability is None:
        return
    why = backend.kernel_blockers(file_name, capability, arch)
    if why:
        device = backend.device_name()
        raise GPUTooOld(f"{file_name}{f' for {arch}' if arch else ''} {why}; this GPU, {device}, has compute "
                        f"capability {capability[0]}.{capability[1]}. Use the NumPy reference, or the figures "
                        "recorded on a GPU in mlsys_lab/data/.")


def sources() -> list[str]:
    """Every kernel source, as ``"<slug>/<name>.cu"`` paths relative to this folder."""
    return sorted(p.relative_to(KERNEL_DIR).as_posix() for p in KERNEL_DIR.glob("*/*.cu"))


def source_path(file_name: str) -> Path:
    """Path of ``"<slug>/<name>.cu"`` under this folder; ValueError listing the sources when it is not one."""
    if file_name not in sources():
        available = ", ".join(sources())
        raise ValueError(f"file_name must be one of the kernel sources ({available}); got {file_name!r}")
    return KERNEL_DIR / file_name


def read_source(file_name: str) -> str:
    """The CUDA source text of ``file_name``."""
    return source_path(file_name).read_text()


def include_options(file_name: str) -> tuple[str, ...]:
    """``-I`` the source's own folder: NVRTC compiles the text, not the file, so ``#include "x.cuh"`` (helpers
    shared by a lesson's kernels) is found only through it. ``nvcc`` finds it beside the file anyway."""
    return (f"-I{source_path(file_name).parent}",)


def define_options(defines: dict[str, int | float | str] | None) -> tuple[str, ...]:
    """``{"BM": 128}`` -> ``("-DBM=128",)``, sorted so equal sets give equal cache keys."""
    return tuple(f"-D{key}={value}" for key, value in sorted((defines or {}).items()))


@functools.lru_cache(maxsize=None)
def _module(file_name: str, options: tuple[str, ...], name_expressions: tuple[str, ...]):
    return backend.xp.RawModule(code=read_source(file_name), options=DEFAULT_OPTIONS + include_options(file_name)
                                + options, name_expressions=name_expressions or None)


def module(file_name: str, defines: dict | None = None, options: tuple[str, ...] = (),
           name_expressions: tuple[str, ...] = ()):
    """The compiled ``cupy.RawModule`` of ``file_name`` with ``defines`` and extra compiler ``options``.

    ``name_expressions`` lists template instantiations to compile, e.g. ``("sgemm_2d<128, 128, 8, 8, 8>",)``.
    """
    require_gpu(file_name)
    file_name = source_path(file_name).relative_to(KERNEL_DIR).as_posix()
    require_capability(file_name)
    options = define_options(defines) + tuple(options)
    return _module(file_name, options, tuple(name_expressions))


def kernel(file_name: str, kernel_name: str, defines: dict | None = None, options: tuple[str, ...] = (),
           arch: str | None = None):
    """One ``cupy.RawKernel`` from ``file_name`` (compiled on first use, then cached).

    ``kernel_name`` is an ``extern "C"`` name or a template instantiation: ``"sgemm_2d<128, 128, 8, 8, 8>"``.
    ``arch`` (e.g. ``"sm_90a"``) compiles for that exact target instead of the one CuPy picks.
    """
    require_gpu(file_name)
    return _kernel(file_name, kernel_name, define_options(defines) + tuple(options), arch)


@functools.lru_cache(maxsize=None)
def _kernel(file_name: str, kernel_name: str, options: tuple[str, ...], arch: str | None):
    file_name = source_path(file_name).relative_to(KERNEL_DIR).as_posix()
    require_capability(file_name, arch)  # here, once per kernel: a refused one raises and is not cached
    if arch is not None:
        return _module_for_arch(file_name, arch, options).get_function(kernel_name)
    names = (kernel_name,) if "<" in kernel_name else ()
    return _module(file_name, options, names).get_function(kernel_name)


@functools.lru_cache(maxsize=None)
def _module_for_arch(file_name: str, arch: str, options: tuple[str, ...]):
    """NVRTC -> cubin for ``arch`` -> ``cupy.RawModule``; a compile error raises RuntimeError with NVRTC's log."""
    try:
        return compile_source(read_source(file_name), file_name, DEFAULT_OPTIONS + include_options(file_name)
                              + options, arch)
    except NVRTCCompileError as exc:
        raise RuntimeError(f"NVRTC could not compile {file_name} for {arch}:\n{exc.log}") from exc


class NVRTCCompileError(RuntimeError):
    """NVRTC refused a source; ``log`` is its message, with lines as ``<file_name>(<line>): error: ...``."""

    def __init__(self, file_name: str, log: str) -> None:
        super().__init__(f"NVRTC could not compile {file_name}:\n{log}")
        self.log = log


def compile_source(source: str, file_name: str, options: tuple[str, ...], arch: str):
    """CUDA C ``source`` -> NVRTC -> a binary for ``arch`` (``"sm_90"``) -> ``cupy.RawModule``.

    The text is compiled as it is (NVRTC prepends nothing), so the line numbers in an error log are the
    source's own. Raises :class:`NVRTCCompileError` with NVRTC's log when it does not compile.
    """
    require_gpu(file_name)
    nvrtc = backend.xp.cuda.nvrtc
    program = nvrtc.createProgram(source, file_name, (), ())
    try:
        nvrtc.compileProgram(program, tuple(options) + (f"--gpu-architecture={arch}",))
        if hasattr(nvrtc, "getCUBIN"):
            binary, suffix = nvrtc.getCUBIN(program), ".cubin"
        else:
            binary, suffix = nvrtc.getPTX(program), ".ptx"
    except nvrtc.NVRTCError as exc:
        raise NVRTCCompileError(file_name, nvrtc.getProgramLog(program)) from exc
    finally:
        nvrtc.destroyProgram(program)
    path = Path(tempfile.mkdtemp(prefix="mlsys_lab_")) / f"{Path(file_name).stem}_{arch}{suffix}"
    path.write_bytes(binary if isinstance(binary, bytes) else binary.encode())
    return backend.xp.RawModule(path=str(path))


def blocks_for(n_items: int, per_block: int) -> int:
    """Number of blocks that cover ``n_items`` with ``per_block`` items each: ceil(n / per_block)."""
    return (n_items + per_block - 1) // per_block
