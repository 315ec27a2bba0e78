"""Static features of a compiled kernel: PTX instructions counted by class, and what ``ptxas -v`` reports
(registers, spills, shared memory). A configuration becomes a vector of counts without running it, the
*static instruction-count space* the lesson compares with the raw configuration as a search coordinate.
"""

from __future__ import annotations

import re
import shutil
import subprocess

from mlsys_lab.kernels.memory_hierarchy.local_memory import parse_ptxas
from mlsys_lab.validation import check_str

# PTX opcode prefixes grouped into classes (PTX ISA 8.x). v4 loads count as one instruction.
INSTRUCTION_CLASSES: dict[str, tuple[str, ...]] = {
    "global_loads": ("ld.global",),
    "global_stores": ("st.global",),
    "shared_loads": ("ld.shared",),
    "shared_stores": ("st.shared",),
    "fma": ("fma.rn.f32",),
    "barriers": ("bar.sync", "barrier.sync"),
    "branches": ("bra",),
    "predicates": ("setp",),
    "integer": ("add.s32", "add.s64", "add.u32", "add.u64", "mul.lo", "mul.wide", "mad.lo", "shl.", "shr.",
                "and.b", "or.b", "sub.s"),
    "moves": ("mov.", "cvta", "cvt."),
}


def entry_body(ptx: str, entry: str) -> str:
    """The PTX text of one kernel (``.entry <name>(`` up to the next ``.entry``); ValueError if absent."""
    check_str("ptx", ptx, nonempty=False)
    check_str("entry", entry)
    match = re.search(rf"\.entry\s+{re.escape(entry)}\s*\(", ptx)
    if match is None:
        raise ValueError(f"entry must name a kernel in ptx; {entry!r} is not there")
    following = ptx.find(".entry", match.end())
    return ptx[match.start(): following if following >= 0 else len(ptx)]


def count_ptx_instructions(ptx: str, entry: str | None = None) -> dict[str, int]:
    """Static count of PTX instructions by class (see ``INSTRUCTION_CLASSES``), plus ``total``.

    Counts each instruction line of the text once, however often it runs: a *static* count.
    ``entry`` restricts the count to one kernel of the module.
    """
    check_str("ptx", ptx, nonempty=False)
    if entry is not None:
        ptx = entry_body(ptx, entry)
    counts = dict.fromkeys(INSTRUCTION_CLASSES, 0)
    total = 0
    for line in ptx.splitlines():
        text = line.strip()
        if not text or text.startswith(("//", ".", "{", "}", "(", ")", "$")) or text.endswith(":"):
            continue
        opcode = text.split()[0]
        if opcode.startswith("@"):  # predicated: "@%p1 bra $L__BB0_2;"
            parts = text.split()
            opcode = parts[1] if len(parts) > 1 else ""
        total += 1
        for name, prefixes in INSTRUCTION_CLASSES.items():
            if opcode.startswith(prefixes):
                counts[name] += 1
                break
    counts["total"] = total
    return counts


def ptxas_resources(log: str, entry: str | None = None) -> dict[str, int]:
    """Registers, spill bytes and shared memory of kernel ``entry`` in ``ptxas -v`` output (the last kernel
    listed without ``entry``), read by :func:`~mlsys_lab.kernels.memory_hierarchy.local_memory.parse_ptxas`."""
    check_str("log", log, nonempty=False)
    if entry is not None:
        check_str("entry", entry)
    usages = parse_ptxas(log)
    if entry is not None:
        usages = [u for u in usages if u.kernel == entry]
        if not usages:
            raise ValueError(f"entry must name a kernel in the ptxas log; {entry!r} is not there")
    if not usages:
        raise ValueError("log must hold a ptxas -v report (\"Compiling entry function ...\"); none found")
    usage = usages[-1]
    return {"registers": usage.registers, "spill_store_bytes": usage.spill_store_bytes,
            "spill_load_bytes": usage.spill_load_bytes, "shared_bytes": usage.shared_bytes}


def compile_static_features(source_path: str, defines: dict[str, int], entry: str = "matmul_tunable",
                            arch: str = "sm_90") -> dict[str, int]:
    """Compile ``source_path`` with ``nvcc --ptx`` and ``ptxas -v``; the static features of kernel ``entry``.

    Needs ``nvcc`` and ``ptxas`` on PATH (the CUDA toolkit); raises RuntimeError saying so otherwise.
    """
    if not (shutil.which("nvcc") and shutil.which("ptxas")):
        raise RuntimeError("nvcc and ptxas are needed for static features: install the CUDA toolkit, "
                           "or use the features recorded in mlsys_lab/data/autotune_gpu.json")
    flags = [f"-D{k}={v}" for k, v in sorted(defines.items())]
    ptx = subprocess.run(["nvcc", f"-arch={arch}", "-std=c++17", "--ptx", *flags, source_path, "-o", "-"],
                         check=True, capture_output=True, text=True).stdout
    log = subprocess.run(["ptxas", f"-arch={arch}", "-v", "-o", "/dev/null", "-"], input=ptx,
                         check=True, capture_output=True, text=True).stderr
    return {**count_ptx_instructions(ptx, entry), **ptxas_resources(log, entry)}


# The static features the lesson's surrogate reads, in this order.
STATIC_FEATURES = ("global_loads", "global_stores", "shared_loads", "shared_stores", "fma", "barriers",
                   "branches", "predicates", "integer", "moves", "total", "registers", "spill_store_bytes",
                   "spill_load_bytes")
