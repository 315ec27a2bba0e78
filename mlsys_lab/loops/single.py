"""Single-loop transformations as numba kernels: unrolling, vectorization, peeling, parallelization, fusion.

Each pair computes the same thing; only the loop's shape changes. Arrays are float64, 1-D unless
the name says 2-D. The notebook times each pair and reads the vector instructions in the assembly.
"""

from __future__ import annotations

import re

from numba import njit, prange

from mlsys_lab.validation import check_choice, check_int, check_str, check_type


@njit(cache=True)
def sum_naive(x):
    """One accumulator: each add waits for the previous one (a ~3-4 cycle latency chain), no SIMD."""
    acc = 0.0
    for i in range(x.size):
        acc += x[i]
    return acc


@njit(cache=True)
def sum_unrolled(x):
    """Unrolled by 8 with 8 accumulators: 8 independent chains keep the adder busy (ILP).

    Reassociating the sum changes rounding slightly: the compiler may not do this on its own.
    """
    n = x.size
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    main = n - n % 8
    for i in range(0, main, 8):
        a0 += x[i]
        a1 += x[i + 1]
        a2 += x[i + 2]
        a3 += x[i + 3]
        a4 += x[i + 4]
        a5 += x[i + 5]
        a6 += x[i + 6]
        a7 += x[i + 7]
    for i in range(main, n):  # the remainder, peeled off
        a0 += x[i]
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


@njit(fastmath=True, cache=True)
def sum_vectorized(x):
    """The naive loop with reassociation allowed (fastmath): LLVM emits SIMD adds, several vectors wide."""
    acc = 0.0
    for i in range(x.size):
        acc += x[i]
    return acc


@njit(cache=True)
def smooth_branchy(x, out):
    """3-point average with the boundary tested inside the loop (clamped ends)."""
    n = x.size
    for i in range(n):
        if i == 0:
            out[i] = (2.0 * x[0] + x[1]) / 3.0
        elif i == n - 1:
            out[i] = (x[n - 2] + 2.0 * x[n - 1]) / 3.0
        else:
            out[i] = (x[i - 1] + x[i] + x[i + 1]) / 3.0
    return out


@njit(cache=True)
def smooth_peeled(x, out):
    """The same average with the two boundary iterations peeled off: the main loop has no branch."""
    n = x.size
    out[0] = (2.0 * x[0] + x[1]) / 3.0
    interior_in = x[1:n - 1]
    left = x[0:n - 2]
    right = x[2:n]
    interior_out = out[1:n - 1]
    for i in range(n - 2):
        interior_out[i] = (left[i] + interior_in[i] + right[i]) / 3.0
    out[n - 1] = (x[n - 2] + 2.0 * x[n - 1]) / 3.0
    return out


@njit(cache=True)
def jacobi_serial(u, out):
    """One Jacobi step of the 2-D 5-point stencil on the interior, rows one after another."""
    rows, cols = u.shape
    for i in range(1, rows - 1):
        for j in range(1, cols - 1):
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
    return out


@njit(parallel=True, cache=True)
def jacobi_parallel(u, out):
    """The same step with rows spread over cores (prange): no iteration reads what another writes."""
    rows, cols = u.shape
    for i in prange(1, rows - 1):
        for j in range(1, cols - 1):
            out[i, j] = 0.25 * (u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1])
    return out


@njit(cache=True)
def affine_relu_unfused(x, scale, shift, tmp, out):
    """Two loops: y = scale * x + shift written to memory, then relu(y) read back: 4 passes over memory."""
    for i in range(x.size):
        tmp[i] = scale * x[i] + shift
    for i in range(x.size):
        out[i] = max(tmp[i], 0.0)
    return out


@njit(cache=True)
def affine_relu_fused(x, scale, shift, tmp, out):
    """One loop: y stays in a register: 2 passes (read x, write out). ``tmp`` is unused."""
    for i in range(x.size):
        out[i] = max(scale * x[i] + shift, 0.0)
    return out


# A packed-double arithmetic instruction, in AT&T syntax (what numba's ``inspect_asm`` prints): the
# destination register is the *last* operand, and the first one may be a memory reference
# (``vaddpd 8(%rax,%r11,8), %ymm1, %ymm1``), so the width is read from the last xmm/ymm/zmm register
# of the line (the greedy ``[^\n]*`` backtracks to it; a mask such as ``{%k1}`` after it is skipped).
PACKED_DOUBLE = r"\bv(add|fmadd\w*|mul|div|max)pd\s[^\n]*%([xyz]mm)\d+"


def _check_dispatcher(dispatcher) -> None:
    """A numba function (a dispatcher with compiled signatures): TypeError naming ``dispatcher``."""
    if not hasattr(dispatcher, "signatures") or not hasattr(dispatcher, "py_func"):
        raise TypeError(f"dispatcher must be a numba function (@numba.njit); got {type(dispatcher).__name__} "
                        f"{dispatcher!r:.40}")


def _assembly(dispatcher) -> str:
    """The assembly of every compiled signature of a numba function, compiled afresh without cache.

    numba cannot show the assembly of code loaded from its disk cache, so the function is compiled
    again here with the same options.
    """
    if not dispatcher.signatures:
        raise ValueError("call the kernel once before inspecting it: its argument types are not known yet")
    options = {k: v for k, v in dispatcher.targetoptions.items() if k not in ("cache", "nopython")}
    fresh = njit(**options)(dispatcher.py_func)
    for signature in dispatcher.signatures:
        fresh.compile(signature)
    return "\n".join(fresh.inspect_asm().values())


def count_vector_instructions(asm: str, pattern: str = PACKED_DOUBLE) -> dict[str, int]:
    """Count the packed-double instructions of AT&T assembly text, by register width (xmm, ymm, zmm)."""
    check_str("asm", asm, nonempty=False)
    check_str("pattern", pattern)
    counts: dict[str, int] = {"xmm": 0, "ymm": 0, "zmm": 0}
    for match in re.finditer(pattern, asm):
        counts[match.group(2)] += 1
    return counts


DOUBLES_PER_REGISTER = {"xmm": 2, "ymm": 4, "zmm": 8}


def vector_width(counts: dict[str, int]) -> str | None:
    """The widest register that a count of :func:`count_vector_instructions` uses; None if it has none."""
    check_type("counts", counts, dict)
    for width, count in counts.items():
        check_choice("counts", width, tuple(DOUBLES_PER_REGISTER))
        check_int("counts", count, low=0)
    used = [width for width, count in counts.items() if count]
    return max(used, key=DOUBLES_PER_REGISTER.__getitem__) if used else None


def vector_instructions(dispatcher, pattern: str = PACKED_DOUBLE) -> dict[str, int]:
    """Count packed-double SIMD instructions in a numba function's assembly, by register width.

    xmm = 128-bit (2 doubles), ymm = 256-bit (4, AVX2), zmm = 512-bit (8, AVX-512). Call the function
    once first so that its argument types are known.
    """
    _check_dispatcher(dispatcher)
    if re.compile(check_str("pattern", pattern)).groups < 2:
        raise ValueError(f"pattern must have two groups (the operation and the register width); got {pattern!r}")
    return count_vector_instructions(_assembly(dispatcher), pattern)


def _is_code(line: str) -> bool:
    """An instruction or a label, not an assembler directive (``.loc``, ``.p2align``) or a comment."""
    return bool(line) and not line.startswith(("#", ";")) and (not line.startswith(".") or line.endswith(":"))


def hottest_vector_loop(asm: str, pattern: str = PACKED_DOUBLE) -> list[str]:
    """The instructions of the loop with the most packed-double instructions in AT&T assembly text.

    A loop here is a basic block that ends by jumping back to its own label (LLVM's innermost loops).
    Returns its lines, label first, directives dropped; an empty list if no loop uses packed doubles.
    """
    check_str("asm", asm, nonempty=False)
    check_str("pattern", pattern)
    lines = [line.strip() for line in asm.splitlines()]
    lines = [" ".join(line.split()) for line in lines if _is_code(line)]
    best: list[str] = []
    best_count = 0
    for start, line in enumerate(lines):
        if not line.endswith(":"):
            continue
        label = line[:-1]
        for end in range(start + 1, len(lines)):
            if lines[end].endswith(":"):
                break  # another block starts: this one falls through, it is not a self-loop
            if lines[end].startswith("j") and lines[end].split()[-1] == label:
                block = lines[start:end + 1]
                count = sum(count_vector_instructions("\n".join(block), pattern).values())
                if count > best_count:
                    best, best_count = block, count
                break
    return best


def vector_loop(dispatcher, pattern: str = PACKED_DOUBLE) -> list[str]:
    """The hottest packed-double loop of a numba function's assembly (see :func:`hottest_vector_loop`)."""
    _check_dispatcher(dispatcher)
    check_str("pattern", pattern)
    return hottest_vector_loop(_assembly(dispatcher), pattern)
