"""Registers and local memory: a kernel with many live values spills to local memory (HBM) when its registers
are capped (``local.cu``), and what ``ptxas -v`` reports about registers, spills and stack.

Launchers take and return device arrays and raise :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU;
:func:`ptxas_usage` needs only ``nvcc``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import THREADS
from mlsys_lab.validation import check_array, check_int, check_str


def register_pressure(x, n_live: int = 64, iters: int = 64, max_registers: int | None = None):
    """Run ``register_pressure``: ``n_live`` live floats per thread, at most ``max_registers`` registers."""
    loader.require_gpu("register_pressure")
    xp = backend.xp
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
    x = np.asarray(check_array("x", x, ndim=1, finite=True), dtype=np.float32)
    check_int("n_live", n_live, low=1, high=4096)
    check_int("iters", iters, low=0, high=10**5)
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

    def __post_init__(self) -> None:
        check_str("kernel", self.kernel)
        for name in ("registers", "spill_store_bytes", "spill_load_bytes", "stack_frame_bytes", "shared_bytes"):
            check_int(name, getattr(self, name), low=0)


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
    check_str("text", text, nonempty=False)
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
