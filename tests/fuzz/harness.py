"""The fuzz harness: discover the library's public API, find a valid call, then break it one argument at a time.

Every public function and dataclass of ``mlsys_lab`` (less the exclusions of :data:`EXCLUDED_BY_CATEGORY` and
:data:`EXCLUDED_MODULES_BY_CATEGORY`, each with its reason) gets one
*baseline* call that works (:mod:`fuzz.baselines`). Each parameter in turn is then replaced by bad and edge
values, fixed ones, typed ones made from its baseline value and a few of a pool Hypothesis generates
(:mod:`fuzz.values`); a parameter whose baseline is a config (a dataclass instance) then gets configs with one field
broken at a time (recorded as ``parameter.field``). Each call is judged:

=========  =================================================================================================
clear      ValueError/TypeError whose message names the parameter that was replaced (the field, for a config
           with a broken field)
correct    a result that looks sensible: finite where the baseline was finite, not negative where the
           baseline was not, of the baseline's kind, for a value of the annotated type
unclear    any other exception, or a ValueError/TypeError that names another parameter
silent     a result for a meaningless input: NaN/inf, a negative number, another kind of result, an argument
           of the wrong type (a float for an int, a string for a number or for a sequence of names, a mapping
           for a number, garbage for a config) taken without complaint, or a value no answer can make right
           (:data:`fuzz.values.MUST_REFUSE`: lexicographically negative dependence vectors)
hang       the call ran longer than :data:`TIME_LIMIT_S` (interrupted by ``signal.setitimer``)
=========  =================================================================================================
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import importlib
import inspect
import io
import math
import numbers
import os
import pickle
import pkgutil
import re
import select
import signal
import sys
import time
import types
import typing
import warnings
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
from fuzz.values import FIXED_BAD, MUST_REFUSE, broken_fields, generated_for, generated_pool, typed_bad

import mlsys_lab

TIME_LIMIT_S = 1.0
TARGET_BUDGET_S = 1.0  # fuzzing one target stops (the rest counted 'skipped') past this

# What is left out, by category, and why: whole packages or modules (EXCLUDED_MODULES_BY_CATEGORY) and single
# targets (EXCLUDED_BY_CATEGORY). Issue #19 allows leaving out only what needs a GPU, runs processes, writes files
# or reaches the network; the other categories say why a call of theirs cannot be judged in a fuzz child. The test
# prints how many targets each category leaves out, so nothing is skipped silently.
GPU = "needs a CUDA GPU"
PROCESSES = "runs processes"
FILES = "writes files"
NETWORK = "opens the network or a browser"
WALL_CLOCK = "wall-clock measurement"
NOT_LIBRARY = "not the library's API"
ARGUMENT_CHECK = "an argument check itself"
COMPILER = "compiles per call"

EXCLUDED_MODULES_BY_CATEGORY: dict[str, dict[str, str]] = {
    NOT_LIBRARY: {
        "mlsys_lab.widgets": "draws figures; explorers show the library's messages (issue #19, part 3)",
        "mlsys_lab.exercises": "checks of a learner's functions, not the library's API",
        "mlsys_lab.tracebacks": "reads an exception's traceback for a check's message (tests/floor/test_tracebacks.py)",
        "mlsys_lab.argument_changes": "a check's machinery: snapshots the arrays a check passed a learner's function "
                                      "and names the ones changed in place (its doctest)",
    },
    PROCESSES: {
        "mlsys_lab.course": "instructor tools that read and write notebooks and run processes",
        "mlsys_lab.mpi": "finds and runs mpiexec (processes)",
        "mlsys_lab.cpu": "sets thread environment variables for the whole process",
        "mlsys_lab.collectives.launch": "launches MPI processes",
        "mlsys_lab.collectives.mpi_ring": "runs under mpiexec (processes)",
        "mlsys_lab.parallelism.mpi_run": "runs under mpiexec (processes)",
        "mlsys_lab.moe.mpi_dispatch": "runs under mpiexec (processes)",
        "mlsys_lab.fault_tolerance.kill_resume": "starts and kills training processes",
        "mlsys_lab.capstone.dp_run": "runs under mpiexec (processes)",
        "mlsys_lab.capstone.pp_run": "runs under mpiexec (processes)",
        "mlsys_lab.capstone.ep_run": "runs under mpiexec (processes)",
        "mlsys_lab.capstone.launch": "launches MPI processes and kills one with SIGKILL",
        "mlsys_lab.capstone.verify": "runs the capstone over MPI processes, kills one, swaps pieces in the store",
    },
    GPU: {
        "mlsys_lab.kernels.loader": "compiles CUDA sources (needs nvcc and a GPU)",
        "mlsys_lab.collectives.nccl_ring": "needs GPUs and NCCL",
    },
    FILES: {
        "mlsys_lab.fault_tolerance.checkpoint_io": "writes checkpoint files",
        "mlsys_lab.training_memory.weights_io": "writes weight files",
        "mlsys_lab.pieces": "keeps and loads the learner's pieces (files in their folder; tests/floor/test_pieces.py)",
        "mlsys_lab.capstone.checkpoint": "writes checkpoint files",
        "mlsys_lab.capstone.stack": "loads the learner's pieces (files in their folder; tests/capstone/test_stack.py)",
    },
    WALL_CLOCK: {
        "mlsys_lab.loops.measure": "wall-clock benchmarks: each call times kernels for seconds by design",
        "mlsys_lab.operators.measure": "wall-clock benchmarks: each call times kernels for seconds by design",
        "mlsys_lab.roofline.measured": "wall-clock benchmarks of this machine",
        "mlsys_lab.timing": "benchmark(): times a callable for as long as it is told",
    },
}

_KERNELS = "mlsys_lab.kernels."
_LAUNCHER = "a CUDA launcher: on a CPU it raises GPUUnavailable before it computes anything"
EXCLUDED_BY_CATEGORY: dict[str, dict[str, str]] = {
    GPU: {
        "mlsys_lab.hardware.probe": "asks the driver (nvidia-smi) about this machine",
        "mlsys_lab.backend.describe": "asks the driver about the GPU",
        "mlsys_lab.collectives.datapaths.measure_host_to_device": "times a host-to-device copy (CuPy on a GPU)",
        **{_KERNELS + name: _LAUNCHER for name in (
            "loops.launchers.affine_relu", "loops.launchers.jacobi5", "loops.launchers.matmul_naive",
            "loops.launchers.matmul_tunable", "memory_hierarchy.bf16_gemm.bf16_gemm",
            "memory_hierarchy.constant_memory.poly", "memory_hierarchy.flash_attention.flash_attention",
            "memory_hierarchy.fused.silu_affine", "memory_hierarchy.fused.softmax_rows",
            "memory_hierarchy.fused.softmax_rows_persistent", "memory_hierarchy.fused.sum_reduce",
            "memory_hierarchy.global_memory.copy", "memory_hierarchy.global_memory.read_passes",
            "memory_hierarchy.global_memory.read_strided", "memory_hierarchy.local_memory.register_pressure",
            "memory_hierarchy.sgemm.sgemm", "memory_hierarchy.shared_memory.shared_stride",
            "memory_hierarchy.shared_memory.transpose_on_gpu", "moe.expert_ffn.moe_ffn_grouped_kernel",
            "roofline.littles_law.ffma_chains", "roofline.littles_law.mma_chains",
            "roofline.littles_law.pointer_chase", "roofline.littles_law.read_inflight",
            "training_memory.int8_matmul.int8_weight_matmul", "tma.tensor_map",
            "operators.bias_gelu.bias_gelu", "training_memory.softmax_xent.softmax_xent_on_gpu",
            "roofline.reduce.sum_atomic", "moe.permute.moe_permute",
            "moe.permute.moe_unpermute", "memory_hierarchy.flash_attention_hopper.flash_attention_hopper",
            "memory_hierarchy.fp8_block_gemm.fp8_block_gemm_on_gpu",
            "memory_hierarchy.flash_attention_hopper_backward.flash_attention_hopper_backward")},
        _KERNELS + "learner.compile_learner_kernel": "compiles a learner's CUDA source with NVRTC (GPUUnavailable on "
                                                     "a CPU)",
        **{_KERNELS + name: "compiles a CUDA kernel through the loader (GPUUnavailable on a CPU)" for name in (
            "loops.launchers.tunable_function", "memory_hierarchy.bf16_gemm.compiled_step",
            "memory_hierarchy.bf16_gemm.step_resources", "memory_hierarchy.flash_attention.kernel_resources",
            "memory_hierarchy.local_memory.register_pressure_kernel",
            "memory_hierarchy.flash_attention_hopper.hopper_attention_resources",
            "memory_hierarchy.flash_attention_hopper.compiled_hopper_attention",
            "memory_hierarchy.fp8_block_gemm.fp8_gemm_resources", "memory_hierarchy.fp8_block_gemm.compiled_fp8_gemm",
            "memory_hierarchy.flash_attention_hopper_backward.backward_resources",
            "memory_hierarchy.flash_attention_hopper_backward.compiled_backward")},
        **{_KERNELS + name: "reads the attributes of a compiled cupy.RawKernel (only a GPU makes one)" for name in (
            "memory_hierarchy.bf16_gemm.blocks_per_sm", "memory_hierarchy.bf16_gemm.occupancy_record")},
    },
    PROCESSES: {
        "mlsys_lab.fault_tolerance.detection.run_ranks": "starts rank processes (fork) that sleep and meet in barriers",
        **{f"mlsys_lab.capstone.dp.{name}": "a rank of an MPI job: needs a communicator that only mpiexec's processes "
                                            "have (tests/capstone/test_dp.py runs them)" for name in (
            "MpiNetwork", "MpiGroup")},
        "mlsys_lab.capstone.pipeline.PipelineStage": "a rank of an MPI job: needs a communicator that only mpiexec's "
                                                     "processes have (tests/capstone/test_pipeline.py runs it)",
        "mlsys_lab.capstone.zero.Zero1Optimizer": "a rank of an MPI job: needs a communicator that only mpiexec's "
                                                  "processes have (tests/capstone/test_dp.py runs it)",
        **{f"mlsys_lab.capstone.ep.{name}": "a rank of an MPI job: needs a communicator that only mpiexec's processes "
                                            "have (tests/capstone/test_ep.py runs them)" for name in (
            "MpiAllToAll", "ExpertParallelMoe")},
        "mlsys_lab.capstone.ddp.ddp_step": "a rank of an MPI job: starts a communication thread that all-reduces "
                                            "through an MpiGroup (tests/capstone/test_ddp.py runs it on MPI ranks)",
        "mlsys_lab.autotuning.features.compile_static_features": "runs nvcc (a subprocess; needs the CUDA toolkit)",
        _KERNELS + "memory_hierarchy.local_memory.ptxas_usage": "runs nvcc -Xptxas -v (a subprocess; needs the "
                                                                 "CUDA toolkit)",
    },
    FILES: {
        "mlsys_lab.fault_tolerance.resume.save_checkpoint": "writes checkpoint files",
    },
    WALL_CLOCK: {
        "mlsys_lab.autotuning.space.measure_cpu_tiles": "wall-clock measurement of tile configurations",
        "mlsys_lab.peft.finetune.pretrain_base": "trains a model for seconds (its baseline alone takes ~10 s)",
        **{f"mlsys_lab.peft.finetune.{name}": "times a training step (benchmark, median of 10) after training on "
                                                "4096 examples: ~1 s a call, past the per-call limit"
           for name in ("finetune", "compare_methods", "qlora_finetune")},
        "mlsys_lab.peft.finetune.step_seconds": "CPU seconds of a training step's parts, the median of ``rounds``: a "
                                                "measurement, ~1 s a call",
        "mlsys_lab.capstone.ddp.measure_layer_seconds": "wall-clock measurement: times each layer's backward "
                                                        "(bucketed_backward, fuzzed, computes the same)",
        "mlsys_lab.operators.task_pool.run_on_threads": "starts worker threads that sleep for the given seconds (a "
                                                        "real-time run); the per-call timer cannot stop them",
    },
    COMPILER: {
        "mlsys_lab.loops.matmul.matmul_microkernel": "compiles a numba kernel per (mr, nr): the timer interrupting "
                                                     "the compiler crashes the interpreter",
    },
    ARGUMENT_CHECK: {
        f"mlsys_lab.validation.{check}": "an argument check itself: called with the library's own literal names and "
                                         "ranges, and a bad `value` is what it exists to judge (-1 for low=None is "
                                         "fine)"
        for check in ("check_int", "check_number", "check_positive", "check_finite", "check_bool", "check_type",
                      "check_array", "check_index_array", "check_choice", "check_divisible", "check_divides",
                      "check_sequence", "check_str", "check_names")},
}
EXCLUDED_BY_CATEGORY[ARGUMENT_CHECK]["mlsys_lab.records.check_name"] = \
    EXCLUDED_BY_CATEGORY[ARGUMENT_CHECK]["mlsys_lab.validation.check_int"]

_STAGE = ("a stage of the capstone model's forward or backward over its parameter views and caches: the model's "
          "loss_and_grad (fuzzed) and the pipeline's stages check the arguments before they call it")
EXCLUDED_BY_CATEGORY.setdefault(NOT_LIBRARY, {}).update({f"mlsys_lab.capstone.model.{name}": _STAGE for name in (
    "transformer_block", "transformer_block_back", "dense_mlp", "dense_mlp_back", "embed", "embed_back",
    "head_loss_and_back")})
EXCLUDED_MODULES = {m: why for table in EXCLUDED_MODULES_BY_CATEGORY.values() for m, why in table.items()}
EXCLUDED_FUNCTIONS = {name: why for table in EXCLUDED_BY_CATEGORY.values() for name, why in table.items()}


def category_of(name: str) -> str:
    """The category that leaves out a target or module (see EXCLUDED_BY_CATEGORY)."""
    for category, table in EXCLUDED_BY_CATEGORY.items():
        if name in table:
            return category
    for category, table in EXCLUDED_MODULES_BY_CATEGORY.items():
        if any(name == m or name.startswith(m + ".") for m in table):
            return category
    raise KeyError(name)


# Targets whose numba code is compiled before fuzzing, in a separate interpreter, and why. A numba function
# compiles on its first call (seconds, far longer on a loaded machine): in a fuzz child the compile can run past
# the baseline's time limit, and the per-call timer interrupting the compiler crashes the interpreter. Compiling
# in this process instead is worse: a parallel=True compile starts OpenMP threads, and every forked child then
# dies at its first parallel call ("fork() called from a process already using GNU OpenMP"). A separate
# interpreter fills numba's on-disk cache (cache=True), and the child loads from it in milliseconds.
# Each entry: (Python code run with ``python -c``, the reason).
WARM_IN_SUBPROCESS = {
    "mlsys_lab.moe.fused_gate.gate_fused": (
        "import numpy as np; from mlsys_lab.moe.fused_gate import gate_fused\n"
        "for dtype in (np.float64, np.float32): gate_fused(np.zeros((2, 3), dtype=dtype), 1)",
        "numba compiles _gate_fused (parallel=True, cache=True) on the first call of each dtype"),
}


def warm_numba(names) -> None:
    """Fill numba's on-disk cache for the targets of WARM_IN_SUBPROCESS among ``names`` (a failure only means the
    fuzz child compiles, as it would without this)."""
    import subprocess

    for name, (code, _why) in WARM_IN_SUBPROCESS.items():
        if name in names:
            subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, timeout=300)


def excluded(name: str) -> bool:
    """Is a module or function left out (see EXCLUDED_MODULES / EXCLUDED_FUNCTIONS)?"""
    return name in EXCLUDED_FUNCTIONS or any(name == m or name.startswith(m + ".") for m in EXCLUDED_MODULES)


def _public(module_name: str):
    """(qualified name, object) of each public function and dataclass a module defines."""
    module = importlib.import_module(module_name)
    for name, obj in vars(module).items():
        if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
            continue
        if inspect.isfunction(obj) or (inspect.isclass(obj) and dataclasses.is_dataclass(obj)):
            yield f"{module_name}.{name}", obj


def discover_all() -> tuple[dict[str, object], dict[str, str]]:
    """({qualified name: target} of every public function and dataclass to fuzz, {qualified name: category} of
    every one left out by EXCLUDED_MODULES_BY_CATEGORY or EXCLUDED_BY_CATEGORY)."""
    found, left_out = {}, {}
    for info in pkgutil.walk_packages(mlsys_lab.__path__, "mlsys_lab."):
        try:
            targets = list(_public(info.name))
        except Exception:  # noqa: BLE001 - a left-out module may not import here (no MPI); count it as one
            if not excluded(info.name):
                raise
            left_out[info.name] = category_of(info.name)
            continue
        for qualified, obj in targets:
            if excluded(qualified):
                left_out[qualified] = category_of(qualified)
            else:
                found[qualified] = obj
    return found, left_out


def discover() -> dict[str, object]:
    """Every public function and dataclass defined in ``mlsys_lab`` and not left out, by qualified name."""
    return discover_all()[0]


# --- judging a call ---------------------------------------------------------------------------------------

class Hang(Exception):
    """Raised by the interval timer inside a call that ran past TIME_LIMIT_S."""


def _on_alarm(signum, frame):
    raise Hang


@contextmanager
def limits():
    """A handler for the per-call interval timer; warnings and NumPy floating-point warnings silenced."""
    old_handler = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)


POSITIONAL = "*"  # a baseline's key for the values of a *args parameter (never replaced by the fuzzer)


def timed_call(fn, kwargs, seconds: float = TIME_LIMIT_S):
    """``fn(**kwargs)`` under the timer: ('ok', result) or ('raised', exception) or ('hang', None)."""
    # re-fires every 0.1 s: an exception raised inside a gc callback is swallowed, the next one is not
    kwargs = dict(kwargs)
    args = kwargs.pop(POSITIONAL, ())  # the *args of a target with a variadic parameter (``trace(fn, *shapes)``)
    if args:  # the parameters before *args then go by position too
        before = []
        for p in inspect.signature(fn).parameters.values():
            if p.kind is inspect.Parameter.VAR_POSITIONAL:
                break
            before.append(kwargs.pop(p.name))
        args = (*before, *args)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
    try:
        try:
            result = fn(*args, **kwargs)
            signal.setitimer(signal.ITIMER_REAL, 0)
            return "ok", result
        except Hang:
            return "hang", None
        except Exception as error:  # noqa: BLE001 - classifying every exception is the point
            return "raised", error
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Hang:  # the timer fired between the call's end and the disarm
        signal.setitimer(signal.ITIMER_REAL, 0)
        return "hang", None


def _numbers(result, depth: int = 0, out: list | None = None) -> list[float]:
    """The real numbers inside a result (scalars, arrays, containers, dataclasses), at most a few thousand."""
    out = [] if out is None else out
    if depth > 4 or len(out) > 4000:
        return out
    if isinstance(result, bool):
        return out
    if isinstance(result, numbers.Real):
        out.append(float(result))
    elif isinstance(result, np.ndarray) and result.dtype.kind in "fiu":
        out.extend(result.ravel()[:4000].astype(float).tolist())
    elif isinstance(result, dict):
        for v in list(result.values())[:200]:
            _numbers(v, depth + 1, out)
    elif isinstance(result, (list, tuple)):
        for v in result[:200]:
            _numbers(v, depth + 1, out)
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        for f in dataclasses.fields(result)[:50]:
            _numbers(getattr(result, f.name, None), depth + 1, out)
    return out


def _kind(result) -> str:
    if isinstance(result, bool):
        return "bool"
    if isinstance(result, numbers.Real):
        return "number"
    return type(result).__name__


_MAPPINGS = (dict, Mapping, typing.Mapping)
_SEQUENCES = (list, tuple, Sequence, typing.Sequence)


def _matches(value, hint) -> bool:
    """Does ``value`` have the annotated type? True when the annotation is one this check cannot judge.

    Containers are judged by their first few items (a mapping for ``dict[str, float]``, a list or tuple and never a
    str for ``Sequence[str]``), a library class (a config) by isinstance."""
    if hint is inspect.Parameter.empty or hint is typing.Any:
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in args)
    if hint in _MAPPINGS or origin in _MAPPINGS:
        return isinstance(value, Mapping) and (len(args) != 2 or all(
            _matches(k, args[0]) and _matches(v, args[1]) for k, v in list(value.items())[:8]))
    if hint in _SEQUENCES or origin in _SEQUENCES:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple, range, np.ndarray)):
            return False
        if not args or not isinstance(value, (list, tuple)):
            return True
        items = list(value)[:8]
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(_matches(v, h) for v, h in zip(value, args, strict=False))
        return all(_matches(v, args[0]) for v in items)
    if hint in (Iterable, typing.Iterable) or origin in (Iterable, typing.Iterable):
        return not isinstance(value, (str, bytes))
    if hint is np.ndarray:
        return not isinstance(value, (str, bytes, Mapping)) and value is not None
    if inspect.isclass(hint) and hint.__module__.startswith("mlsys_lab"):
        try:
            return isinstance(value, hint)
        except TypeError:  # a Protocol that is not runtime-checkable
            return True
    if hint is type(None):
        return value is None
    if hint is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint in (bool,):
        return isinstance(value, (bool, np.bool_))
    return True


def names_parameter(message: str, parameter: str) -> bool:
    """Does an error message name the parameter (as a word: ``n_heads`` in "n_heads must be ...")?"""
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(parameter)}(?![A-Za-z0-9_])", message) is not None


def classify(status: str, outcome, parameter: str, value, hint, baseline, label: str = "") -> tuple[str, str]:
    """(class, detail) of one call: clear / correct / unclear / silent / hang. For a config with a broken field
    (``parameter`` is ``config.field``, ``value`` and ``hint`` the field's), an error naming the field is clear."""
    if status == "hang":
        return "hang", f"> {TIME_LIMIT_S} s"
    if status == "raised":
        text = f"{type(outcome).__name__}: {str(outcome)[:160]}"
        named = {parameter, parameter.rsplit(".", 1)[-1]}
        if isinstance(outcome, (ValueError, TypeError)) and any(names_parameter(str(outcome), n) for n in named):
            return "clear", text
        return "unclear", text
    if label in MUST_REFUSE:
        return "silent", f"took {label}"
    if not _matches(value, hint):
        return "silent", f"took {value!r:.40} for a {getattr(hint, '__name__', hint)}"
    vectorized = isinstance(value, (np.ndarray, list)) and _kind(outcome) == "ndarray" and _kind(baseline) == "number"
    if _kind(outcome) != _kind(baseline) and not vectorized:  # an array in, an array out: a vectorized function
        return "silent", f"returned a {_kind(outcome)}, the baseline a {_kind(baseline)}"
    got, base = _numbers(outcome), _numbers(baseline)
    if base and all(math.isfinite(x) for x in base) and not all(math.isfinite(x) for x in got):
        return "silent", "NaN or inf in the result"
    if base and min(base) >= 0 and got and min(got) < 0:
        return "silent", f"negative result {min(got):g}"
    return "correct", ""


# --- fuzzing one target -----------------------------------------------------------------------------------

def parameters(target) -> list[inspect.Parameter]:
    """The parameters a caller passes by name (no *args/**kwargs)."""
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD, inspect.Parameter.POSITIONAL_ONLY)
    return [p for p in inspect.signature(target).parameters.values() if p.kind not in kinds]


def hints_of(target) -> dict:
    try:
        return typing.get_type_hints(target)
    except Exception:  # noqa: BLE001 - an unresolvable annotation only means the type check is skipped
        return {}


def copy_kwargs(kwargs: dict) -> dict:
    """A deep copy of a call's arguments (a call may change its arguments in place); a value that cannot be
    copied (a module, a compiled numba function) is passed as it is."""
    out = {}
    for key, value in kwargs.items():
        try:
            out[key] = copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - pickling errors of many kinds
            out[key] = value
    return out


def fuzz_target(target, baseline_kwargs: dict, baseline_result) -> list[tuple[str, str, str, str]]:
    """Calls with one parameter replaced at a time: a list of (parameter, value text, class, detail)."""
    records = []
    hints = hints_of(target)

    start = time.perf_counter()
    hung: set[str] = set()

    def probe(parameter: str, label: str, value, field=None) -> None:
        # one hang of a parameter is enough evidence; past the target's budget the remaining calls are skipped
        if parameter in hung or time.perf_counter() - start > TARGET_BUDGET_S:
            records.append((parameter, label, "skipped", "budget spent" if parameter not in hung else "hung"))
            return
        kwargs = copy_kwargs(baseline_kwargs)
        if field is None:
            kwargs[parameter] = value
            judged, hint = value, hints.get(parameter, inspect.Parameter.empty)
        else:  # a config with one broken field: judged by the field's value and annotation
            config_name, field_name = parameter.split(".", 1)
            kwargs[config_name] = value
            judged, hint = field
        status, outcome = timed_call(target, kwargs)
        cls, detail = classify(status, outcome, parameter, judged, hint, baseline_result, label)
        records.append((parameter, label, cls, detail))
        if cls == "hang":
            hung.add(parameter)

    name = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    for p in parameters(target):
        typed = typed_bad(p.name, baseline_kwargs.get(p.name, p.default), hints.get(p.name))
        for label, value in FIXED_BAD + typed:
            probe(p.name, label, copy.deepcopy(value))
        if any(r[0] == p.name and r[2] in ("unclear", "silent", "hang") for r in records):
            continue  # the pair already fails: more values would not change its verdict
        for label, value in generated_for(name, p.name):
            probe(p.name, label, copy.deepcopy(value))
    for p in parameters(target):  # configs with one broken field: what the config's own checks let through
        config = baseline_kwargs.get(p.name, p.default)
        if not dataclasses.is_dataclass(config) or isinstance(config, type):
            continue
        field_hints = hints_of(type(config))
        for field_name, label, value in broken_fields(config):
            status, broken = timed_call(lambda c=config, f=field_name, v=value: dataclasses.replace(c, **{f: v}), {})
            if status != "ok":  # the config refuses it (or hangs): the fuzz of its own constructor judges that
                continue
            probe(f"{p.name}.{field_name}", label, broken,
                  field=(value, field_hints.get(field_name, inspect.Parameter.empty)))
    return records


def _fuzz_in_child(names: list[str], found: dict, baselines_for) -> tuple[dict, str | None, str]:
    """Fuzz ``names`` in one forked child, streaming one message per target back through a pipe.

    A child keeps a segfault (a numba kernel given a bad size, a compiler interrupted by the timer) or a
    hang the timer cannot interrupt (C code that never checks signals) from taking the whole suite down.
    Returns ({name: records or None}, the target it was on when it died or None, why it died).
    One child per module, not per target: forking and warming numba up 500 times costs more than the fuzzing.
    """
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: whatever escapes (a BaseException of a target's), it ends here, never in pytest
        try:
            os.close(read_fd)
            with os.fdopen(write_fd, "wb") as pipe:
                for name in names:
                    pickle.dump(("start", name, None), pipe)
                    pipe.flush()
                    with limits():
                        base = baselines_for(name, found[name])
                        records = (None if base is None
                                   else [tuple(map(str, r)) for r in fuzz_target(found[name], *base)])
                    pickle.dump(("done", name, records), pipe)
                    pipe.flush()
        except BaseException as exc:  # noqa: BLE001  (reported as the target it was on: a crash)
            print(f"fuzz child: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            os._exit(1)
        os._exit(0)
    os.close(write_fd)
    results, current, why = {}, None, ""
    deadline = time.monotonic() + CHILD_DEADLINE_S * max(1, len(names))
    buffer = b""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                why = "no answer in time (killed)"
                break
            chunk = pipe.read(1 << 20)
            if not chunk:
                break
            buffer += chunk
            while True:
                try:
                    view = io.BytesIO(buffer)
                    kind, name, records = pickle.load(view)
                except (EOFError, pickle.UnpicklingError, ValueError):
                    break  # an incomplete message: wait for more
                buffer = buffer[view.tell():]
                if kind == "start":
                    current = name
                else:
                    results[name], current = records, None
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status) and not why:
        why = f"killed by signal {os.WTERMSIG(status)}"
    return results, current, why


CHILD_DEADLINE_S = 30.0  # per target


def restricted() -> list[str]:
    """The modules named by ``MLSYS_FUZZ_MODULES`` (comma-separated, e.g. ``mlsys_lab.moe,mlsys_lab.roofline.model``)
    to fuzz alone while iterating; empty: the whole library."""
    return [m.strip() for m in os.environ.get("MLSYS_FUZZ_MODULES", "").split(",") if m.strip()]


def run(baselines_for, log=print, trace: bool = False) -> dict:
    """Fuzz the whole library: {'covered': [...], 'uncovered': [...], 'calls': [(target, param, value, cls, detail)]}.

    Each module runs in a forked child (see :func:`_fuzz_in_child`); a target whose child crashes counts
    as one 'unclear' call, and the module's remaining targets go on in a fresh child.
    """
    found, left_out = discover_all()
    if restricted():
        found = {name: obj for name, obj in found.items()
                 if any(name == m or name.startswith(m + ".") for m in restricted())}
    covered, uncovered, calls = [], [], []
    # a forked child's first garbage collection would walk (and so copy, page by page) every object the
    # library's import made: ~1 s per module. Frozen objects are left out of collections.
    generated_pool()  # drawn once here, inherited by every child
    warm_numba(found)
    gc.collect()
    gc.freeze()
    by_module: dict[str, list[str]] = {}
    for name in sorted(found):
        by_module.setdefault(name.rsplit(".", 1)[0], []).append(name)
    start = time.perf_counter()
    for module, names in by_module.items():
        if trace:
            print(module, file=sys.stderr, flush=True)
        todo = list(names)
        while todo:
            results, crashed_on, why = _fuzz_in_child(todo, found, baselines_for)
            for name in todo:
                if name in results:
                    if results[name] is None:
                        uncovered.append(name)
                    else:
                        covered.append(name)
                        calls.extend((name, *record) for record in results[name])
            if crashed_on is None and not why:
                break
            if crashed_on is None and not results:  # died before reporting any target: blame the first
                crashed_on = todo[0]
            if crashed_on is not None:
                covered.append(crashed_on)
                calls.append((crashed_on, "*", "?", "unclear", f"the process crashed: {why}"))
            done = set(results) | {crashed_on}
            todo = [name for name in todo if name not in done]
    log(f"fuzzed {len(by_module)} modules in {time.perf_counter() - start:.0f} s")
    return {"covered": covered, "uncovered": uncovered, "calls": calls, "found": len(found), "names": sorted(found),
            "excluded": left_out}
