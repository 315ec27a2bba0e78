"""Launchers for the memory-hierarchy kernels, each beside its NumPy reference.

==========================  =====================================  ==============================
kernel (file)               what it shows                          reference
==========================  =====================================  ==============================
copy_float4 (global)        the course's own copy                  ``x.copy()``
read_strided (global)       sectors per warp grow with the stride  ``x[::stride][:n]``
read_passes (global)        an L2-resident buffer read many times  ``passes * x.sum()``
transpose_* (shared)        tiling, bank conflicts, padding        ``x.T``
shared_stride (shared)      gcd(stride, 32)-way bank conflicts     ``iters * lane * stride``
poly_* (constant)           broadcast vs serialized reads          :func:`poly_reference`
register_pressure (local)   spills when registers are capped       :func:`register_pressure_reference`
softmax_rows (fused)        one read, one write per element        :func:`softmax_reference`
silu_affine (fused)         a fused elementwise chain              :func:`silu_affine_reference`
sum_partials (fused)        a reduction at copy bandwidth          ``x.sum()``
==========================  =====================================  ==============================

Every launcher takes and returns device arrays and raises :class:`~mlsys_lab.kernels.loader.GPUUnavailable`
on a CPU; every reference takes and returns NumPy arrays.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_choice, check_divisible, check_int, check_number

THREADS = 256
N_COEFFS = 64  # matches memory_hierarchy/constant.cu
TRANSPOSE_KERNELS = ("transpose_naive", "transpose_shared", "transpose_shared_padded")


def _xp():
    loader.require_gpu("this kernel")
    return backend.xp


# ---------------------------------------------------------------------------------- global memory
def copy(x):
    """y = x with the course's float4 copy kernel (``x.size % 4 == 0``)."""
    xp = _xp()
    check_divisible("x.size", x.size, 4)
    y = xp.empty_like(x)
    n4 = x.size // 4
    blocks = min(loader.blocks_for(n4, THREADS), 65535 * 8)
    loader.kernel("memory_hierarchy/global.cu", "copy_float4")((blocks,), (THREADS,), (x, y, np.int64(n4)))
    return y


def read_strided(x, n: int, stride: int):
    """out[i] = x[i * stride] for i < n: the same 4 n useful bytes, more sectors as the stride grows."""
    xp = _xp()
    check_int("stride", stride, low=1, high=1024)
    check_int("n", n, low=1)
    if (n - 1) * stride >= x.size:
        raise ValueError(f"n must satisfy (n - 1) * stride < x.size = {x.size}; got n={n}, stride={stride}")
    out = xp.empty(n, dtype=xp.float32)
    loader.kernel("memory_hierarchy/global.cu", "read_strided")((loader.blocks_for(n, THREADS),), (THREADS,),
                                                      (x, out, np.int64(n), np.int32(stride)))
    return out


def read_passes(x, passes: int, blocks: int = 132 * 8):
    """Per-thread partial sums of ``passes`` sweeps over ``x``; their total is ``passes * x.sum()``."""
    xp = _xp()
    check_int("passes", passes, low=1)
    check_divisible("x.size", x.size, 4)
    out = xp.empty(blocks * THREADS, dtype=xp.float32)
    loader.kernel("memory_hierarchy/global.cu", "read_passes")((blocks,), (THREADS,),
                                                     (x, out, np.int64(x.size // 4), np.int32(passes)))
    return out


# ---------------------------------------------------------------------------------- shared memory
def transpose(x, variant: str = "transpose_shared_padded"):
    """out = x.T (rows, cols) -> (cols, rows) with one of ``TRANSPOSE_KERNELS``."""
    xp = _xp()
    check_choice("variant", variant, TRANSPOSE_KERNELS)
    rows, cols = x.shape
    out = xp.empty((cols, rows), dtype=xp.float32)
    grid = (loader.blocks_for(cols, 32), loader.blocks_for(rows, 32))
    loader.kernel("memory_hierarchy/shared.cu", variant)(grid, (32, 8), (x, out, np.int32(rows), np.int32(cols)))
    return out


def shared_stride(stride: int, iters: int = 4096, blocks: int = 132 * 16, threads: int = 512):
    """Each thread reads shared word ``lane * stride`` ``iters`` times; returns the per-thread sums."""
    xp = _xp()
    check_int("stride", stride, low=1, high=32)
    check_int("iters", iters, low=1, high=2**14)
    out = xp.empty(blocks * threads, dtype=xp.float32)
    fn = loader.kernel("memory_hierarchy/shared.cu", "shared_stride")
    fn((blocks,), (threads,), (out, np.int32(stride), np.int32(iters)))
    return out


def shared_stride_reference(stride: int, iters: int, n_threads: int) -> np.ndarray:
    """What :func:`shared_stride` returns: ``iters * (lane * stride)`` for every thread."""
    lanes = np.arange(n_threads) % 32
    return (iters * ((lanes * stride) & 1023)).astype(np.float32)


# -------------------------------------------------------------------------------- constant memory
def poly(x, coeffs, spread: int, space: str = "constant"):
    """Horner evaluation of ``N_COEFFS`` coefficients, with lane L starting at coefficient L * spread.

    ``space`` "constant" reads ``__constant__`` memory, "global" the same values from an array.
    """
    xp = _xp()
    check_int("spread", spread, low=0, high=1)
    check_choice("space", space, ("constant", "global"))
    if coeffs.size != N_COEFFS:
        raise ValueError(f"coeffs must have {N_COEFFS} values; got {coeffs.size}")
    out = xp.empty_like(x)
    grid = (loader.blocks_for(x.size, THREADS),)
    if space == "constant":
        mod = loader.module("memory_hierarchy/constant.cu")
        symbol = mod.get_global("const_coeffs")
        xp.ndarray((N_COEFFS,), xp.float32, symbol)[...] = coeffs
        mod.get_function("poly_constant")(grid, (THREADS,), (x, out, np.int64(x.size), np.int32(spread)))
    else:
        fn = loader.kernel("memory_hierarchy/constant.cu", "poly_global")
        fn(grid, (THREADS,), (x, coeffs, out, np.int64(x.size), np.int32(spread)))
    return out


def poly_reference(x: np.ndarray, coeffs: np.ndarray, spread: int,
                   threads_per_block: int = THREADS) -> np.ndarray:
    """NumPy version of :func:`poly`: lane = (i % threads_per_block) % 32."""
    x = np.asarray(x, dtype=np.float32)
    shift = ((np.arange(x.size) % threads_per_block) % 32) * spread
    acc = np.zeros_like(x)
    for k in range(N_COEFFS):
        acc = acc * x + coeffs[(k + shift) % N_COEFFS]
    return acc


# ------------------------------------------------------------------------------ registers / local
def register_pressure(x, n_live: int = 64, iters: int = 64, max_registers: int | None = None):
    """Run ``register_pressure``: ``n_live`` live floats per thread, at most ``max_registers`` registers."""
    xp = _xp()
    fn = register_pressure_kernel(n_live, max_registers)
    out = xp.empty_like(x)
    fn((loader.blocks_for(x.size, THREADS),), (THREADS,), (x, out, np.int32(x.size), np.int32(iters)))
    return out


def register_pressure_kernel(n_live: int = 64, max_registers: int | None = None):
    """The compiled kernel (its ``num_regs`` and ``local_size_bytes`` say whether it spilled)."""
    check_int("n_live", n_live, low=2, high=256)
    options = ()
    if max_registers is not None:
        options = (f"--maxrregcount={check_int('max_registers', max_registers, low=16, high=255)}",)
    return loader.kernel("memory_hierarchy/local.cu", "register_pressure", {"N_LIVE": n_live}, options)


def register_pressure_reference(x: np.ndarray, n_live: int = 64, iters: int = 64) -> np.ndarray:
    """NumPy version: r[j] <- (r[j] + r[(j + 1) % n_live]) / 2 swept in order, ``iters`` times; sum(r)."""
    x = np.asarray(x, dtype=np.float32)
    r = x[:, None] * np.arange(1, n_live + 1, dtype=np.float32)  # (n, n_live)
    half = np.float32(0.5)
    for _ in range(iters):
        r[:, :-1] = half * r[:, :-1] + half * r[:, 1:]  # r[j + 1] is not yet updated when r[j] is
        r[:, -1] = half * r[:, -1] + half * r[:, 0]  # ... but r[0] already is when r[n_live - 1] is
    return r.sum(axis=1, dtype=np.float32)


@dataclass(frozen=True)
class PtxasUsage:
    """What ``ptxas -v`` reports for one kernel."""

    kernel: str
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    shared_bytes: int


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_NUMBERS = {
    "stack_frame_bytes": re.compile(r"(\d+) bytes stack frame"),
    "spill_store_bytes": re.compile(r"(\d+) bytes spill stores"),
    "spill_load_bytes": re.compile(r"(\d+) bytes spill loads"),
    "registers": re.compile(r"Used (\d+) registers"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
}


def parse_ptxas(text: str) -> list[PtxasUsage]:
    """Parse ``ptxas -v`` output into one :class:`PtxasUsage` per compiled entry function."""
    blocks = _PTXAS_ENTRY.split(text)[1:]  # [name, body, name, body, ...]
    usages = []
    for name, body in zip(blocks[::2], blocks[1::2], strict=True):
        numbers = {key: int(m.group(1)) if (m := pattern.search(body)) else 0
                   for key, pattern in _PTXAS_NUMBERS.items()}
        usages.append(PtxasUsage(kernel=name, **numbers))
    return usages


def ptxas_usage(file_name: str, defines: dict | None = None, max_registers: int | None = None,
                arch: str = "sm_90") -> list[PtxasUsage]:
    """Compile ``file_name`` with ``nvcc -cubin -Xptxas -v`` (no GPU needed) and parse the report.

    Raises RuntimeError with a clear message when ``nvcc`` is not installed.
    """
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("nvcc (the CUDA toolkit's compiler) is not on PATH; the lesson shows the report "
                           "recorded in mlsys_lab/data/memory_ptxas.json instead")
    command = [nvcc, f"-arch={arch}", "-std=c++17", "-cubin", "-Xptxas", "-v", "-o", "/dev/null",
               *loader.define_options(defines), str(loader.source_path(file_name))]
    if max_registers is not None:
        command.insert(1, f"-maxrregcount={check_int('max_registers', max_registers, low=16, high=255)}")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if done.returncode:
        raise RuntimeError(f"nvcc failed on {file_name}: {done.stderr.strip()[-500:]}")
    return parse_ptxas(done.stderr + done.stdout)


# ---------------------------------------------------------------------------------- fused kernels
def _softmax_defines(x, threads: int, blocks: int, blocks_name: str, streaming: bool, max_vec: int) -> dict:
    """Validate a softmax launch and return the kernel's compile-time settings (one row per block pass)."""
    _rows, cols = x.shape
    check_divisible("cols", cols, 4)
    threads = check_choice("threads", threads, (32, 64, 128, 256, 512, 1024))
    blocks = check_int(blocks_name, blocks, low=1, high=2048 // threads)
    vec = math.ceil(cols / 4 / threads)
    if vec > max_vec:
        raise ValueError(f"cols must be <= {4 * max_vec * threads} for threads={threads}; got {cols}")
    return {"SOFTMAX_THREADS": threads, "SOFTMAX_VEC": vec, "SOFTMAX_MIN_BLOCKS": blocks,
            "SOFTMAX_STREAMING": int(bool(streaming))}


def softmax_rows(x, threads: int = THREADS, min_blocks: int = 1, streaming: bool = False):
    """Row softmax of a (rows, cols) float32 array in one pass; cols % 4 == 0, cols <= 64 * threads.

    One block of ``threads`` per row; the row stays in registers between the max, the sum and the write.
    ``min_blocks`` is the ``__launch_bounds__`` promise of how many blocks must fit on one SM (it caps the
    registers per thread, so it sets the occupancy); ``streaming`` marks the loads and stores evict-first.
    """
    xp = _xp()
    defines = _softmax_defines(x, threads, min_blocks, "min_blocks", streaming, max_vec=16)
    y = xp.empty_like(x)
    softmax_rows = loader.kernel("memory_hierarchy/fused.cu", "softmax_rows", defines)
    softmax_rows((x.shape[0],), (threads,), (x, y, np.int32(x.shape[1])))
    return y


def softmax_rows_persistent(x, threads: int = THREADS, blocks_per_sm: int = 4, streaming: bool = False):
    """:func:`softmax_rows` with ``blocks_per_sm`` x (SM count) resident blocks that loop over the rows,
    loading the next row while reducing the current one (software pipelining; same bytes moved).
    Two rows live in registers, so cols <= 32 * threads."""
    xp = _xp()
    defines = _softmax_defines(x, threads, blocks_per_sm, "blocks_per_sm", streaming, max_vec=8)
    y = xp.empty_like(x)
    rows, cols = x.shape
    n_sm = xp.cuda.Device().attributes["MultiProcessorCount"]
    loader.kernel("memory_hierarchy/fused.cu", "softmax_rows_persistent", defines)(
        (min(rows, n_sm * blocks_per_sm),), (threads,), (x, y, np.int32(rows), np.int32(cols)))
    return y


def softmax_reference(x: np.ndarray) -> np.ndarray:
    """exp(x - max) / sum(exp(x - max)) along the last axis, in float64, returned as float32."""
    x64 = np.asarray(x, dtype=np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def silu_affine(x, scale: float = 1.5, bias: float = -0.25):
    """y = z * sigmoid(z) with z = scale * x + bias, one fused kernel (``x.size % 4 == 0``)."""
    xp = _xp()
    check_divisible("x.size", x.size, 4)
    check_number("scale", scale)
    check_number("bias", bias)
    y = xp.empty_like(x)
    n4 = x.size // 4
    loader.kernel("memory_hierarchy/fused.cu", "silu_affine")((loader.blocks_for(n4, THREADS),), (THREADS,),
                                                    (x, y, np.float32(scale), np.float32(bias), np.int64(n4)))
    return y


def silu_affine_unfused(x, scale: float = 1.5, bias: float = -0.25):
    """The same chain as four array operations (four kernels, four trips through memory); NumPy too."""
    xp = backend.xp
    z = x * np.float32(scale) + np.float32(bias)
    return z / (np.float32(1.0) + xp.exp(-z))


def silu_affine_reference(x: np.ndarray, scale: float = 1.5, bias: float = -0.25) -> np.ndarray:
    """NumPy float64 reference of :func:`silu_affine`, returned as float32."""
    z = np.asarray(x, dtype=np.float64) * scale + bias
    return (z / (1.0 + np.exp(-z))).astype(np.float32)


def sum_reduce(x, blocks: int = 132 * 8):
    """sum(x) in two stages: a kernel writes one partial per block, then the partials are added."""
    xp = _xp()
    check_divisible("x.size", x.size, 4)
    partial = xp.empty(blocks, dtype=xp.float32)
    fn = loader.kernel("memory_hierarchy/fused.cu", "sum_partials")
    fn((blocks,), (THREADS,), (x, partial, np.int64(x.size // 4)))
    return partial.sum(dtype=xp.float64)
