"""A learner's CUDA C, compiled as the course's own kernels are (NVRTC through CuPy), with errors at their lines.

    from mlsys_lab.kernels.learner import compile_learner_kernel
    SOURCE = r'''
    extern "C" __global__ void scale(const float* x, float* out, float s, long long n) { ... }
    '''
    kernel = compile_learner_kernel(SOURCE, "scale")          # a cupy.RawKernel, compiled once per source
    kernel((blocks,), (threads,), (x, out, np.float32(2.0), np.int64(x.size)))

The source is compiled for this GPU's own architecture (``sm_75`` on a T4, ``sm_90`` on an H200), as it is:
line 1 of the error messages is the first line of the string (the newline after ``r'''`` makes the
``extern "C"`` line line 2). A compile error raises :class:`LearnerCompileError` whose message lists each of
NVRTC's errors as ``line 7: error: identifier "idx" is undefined`` followed by that line of the source; a name
the source does not define (or defines without ``extern "C"``, so that C++ mangles it) says so. A handout's
kernel whose body is still the stub (``raise NotImplementedError()``, which is not CUDA) raises
``NotImplementedError``, so that a check reports the exercise as not attempted yet. The course's own notebooks
mark the solution inside the string with the notebooks' begin/end solution marker lines, which are not CUDA:
they are compiled as blank lines (the numbering stays the learner's).
"""

from __future__ import annotations

import functools
import re

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_int

OPTIONS = ("-std=c++17",)
STUB_LINE = "raise NotImplementedError()"  # what the handout generator leaves in place of a solution
MARKERS = ("### BEGIN " + "SOLUTION", "### END " + "SOLUTION")  # the notebooks' solution markers (notebook_cells.py)
FILE_NAME = "your_kernel.cu"
_ERROR = re.compile(rf"^{re.escape(FILE_NAME)}\((\d+)\): (.*)$")


class LearnerCompileError(RuntimeError):
    """The learner's CUDA source did not compile, or has no kernel of the name asked for."""


def compile_learner_kernel(source: str, name: str, options: tuple[str, ...] = ()):
    """The ``extern "C" __global__`` function ``name`` of ``source`` as a ``cupy.RawKernel`` (cached per source).

    ``options`` are extra NVRTC options, e.g. ``("-DTILE=32",)``. Needs a CUDA GPU
    (:class:`~mlsys_lab.kernels.loader.GPUUnavailable` otherwise).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be the kernel's CUDA C text (str); got {type(source).__name__}")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be the kernel's name, a C identifier such as 'bias_gelu'; got {name!r:.40}")
    if not isinstance(options, tuple) or not all(isinstance(o, str) for o in options):
        raise TypeError(f"options must be a tuple of NVRTC options (str), e.g. ('-DTILE=32',); got {options!r:.60}")
    if STUB_LINE in source:
        raise NotImplementedError(f"the body of {name} is still the stub: write it where it says # YOUR CODE HERE")
    loader.require_gpu(f"your kernel {name}")
    return _compiled(without_markers(source), name, options)


def without_markers(source: str) -> str:
    """``source`` with each solution-marker line blanked (same number of lines)."""
    if not isinstance(source, str):
        raise TypeError(f"source must be the kernel's CUDA C text (str); got {type(source).__name__}")
    return "\n".join("" if line.strip() in MARKERS else line for line in source.split("\n"))


@functools.lru_cache(maxsize=64)
def _compiled(source: str, name: str, options: tuple[str, ...]):
    major, minor = backend.compute_capability()
    try:
        module = loader.compile_source(source, FILE_NAME, OPTIONS + options, f"sm_{major}{minor}")
    except loader.NVRTCCompileError as exc:
        raise LearnerCompileError(compile_errors(exc.log, source)) from None
    if not re.search(rf"\b{re.escape(name)}\s*\(", source):
        raise LearnerCompileError(f"your source defines no kernel named {name!r}")
    try:
        return module.get_function(name)
    except Exception:  # CUDA_ERROR_NOT_FOUND: the name exists only mangled
        raise LearnerCompileError(f"{name!r} is in your source but not as a kernel the course can launch: "
                                  f'declare it extern "C" __global__ void {name}(...)') from None


def compile_errors(log: str, source: str, limit: int = 5) -> str:
    """NVRTC's log as the learner reads it: ``line N: error: ...`` and the source line, for the first ``limit``.

    >>> print(compile_errors('your_kernel.cu(2): error: identifier "i" is undefined', "int a;\\nout[i] = 0;"))
    your kernel does not compile (1 error):
      line 2: error: identifier "i" is undefined
          out[i] = 0;
    """
    for label, text in (("log", log), ("source", source)):
        if not isinstance(text, str):
            raise TypeError(f"{label} must be a str (NVRTC's log, the kernel's source); got {type(text).__name__}")
    check_int("limit", limit, low=1)
    lines = source.splitlines()
    found = []
    for entry in log.splitlines():
        match = _ERROR.match(entry.strip())
        if match and "error" in match.group(2):
            number = int(match.group(1))
            text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
            found.append(f"  line {number}: {match.group(2)}" + (f"\n      {text}" if text else ""))
    if not found:  # a log NVRTC wrote in another shape: show it as it is
        return "your kernel does not compile:\n" + log.strip()
    more = f"\n  ... and {len(found) - limit} more" if len(found) > limit else ""
    plural = "s" if len(found) > 1 else ""
    return f"your kernel does not compile ({len(found)} error{plural}):\n" + "\n".join(found[:limit]) + more
