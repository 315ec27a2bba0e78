"""Run a module on P processes with ``mpiexec`` and read back rank 0's JSON line: the one MPI launcher.

Lessons that run real ranks (the ring all-reduce of 07, data and tensor parallelism in 08, the MoE
dispatch in 11) start ``mpiexec -n P python -m <module> ...`` through :func:`run_mpi`. The module's
rank 0 prints one JSON object on stdout that names the communicator size as ``n_ranks``.

``mpiexec`` is looked for next to the running Python first (the ``mpich`` wheel the course installs
puts it in the virtual environment's ``bin/``), then on ``PATH``. MPICH (Hydra) and Open MPI both
work: Open MPI refuses to start as root, and refuses more processes than cores, unless told
otherwise, so the child environment says so. BLAS runs one thread per process (the ranks share the
cores).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from mlsys_lab.validation import check_int, check_positive


class MpiUnavailable(RuntimeError):
    """No usable MPI here; the message says what is missing and how to get it."""


def find_mpiexec() -> str | None:
    """``mpiexec`` next to ``sys.executable`` (the venv's), else on PATH (``mpiexec``, then ``mpirun``)."""
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("mpiexec") or shutil.which("mpirun")


def mpi_flavor(mpiexec: str) -> str:
    """'openmpi', 'mpich' or 'unknown', from ``mpiexec --version``."""
    try:
        text = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lowered = text.lower()
    if "open mpi" in lowered or "open-mpi" in lowered or "openrte" in lowered or "prrte" in lowered:
        return "openmpi"
    if "hydra" in lowered or "mpich" in lowered:
        return "mpich"
    return "unknown"


def child_environment(base: dict[str, str] | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for mpiexec: Open MPI may run as root and oversubscribe; BLAS stays single-threaded.

    ``base`` defaults to this process's environment; ``extra`` (e.g. ``{"MLSYS_LAB_BACKEND": "numpy"}``)
    is applied last.
    """
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "OMPI_ALLOW_RUN_AS_ROOT": "1",
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            "OMPI_MCA_rmaps_base_oversubscribe": "1",  # Open MPI 4
            "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",  # Open MPI 5 (PRRTE)
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
        }
    )
    env.update(extra or {})
    return env


def launch_command(mpiexec: str, flavor: str, n_procs: int, module: str, args: list[str]) -> list[str]:
    """``mpiexec -n P [--oversubscribe] python -m module args...`` for this flavor."""
    n_procs = check_int("n_procs", n_procs, low=1, high=64)
    extra = ["--oversubscribe"] if flavor == "openmpi" else []
    return [mpiexec, "-n", str(n_procs), *extra, sys.executable, "-m", module, *args]


def mpi_status() -> str:
    """One line: which mpiexec would run, or why none can."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        return "no mpiexec found (pip install mpich mpi4py, or install Open MPI): the lesson uses the simulation"
    return f"mpiexec: {mpiexec} ({mpi_flavor(mpiexec)})"


def run_mpi(module: str, n_procs: int, args: list[str], timeout_s: float = 120.0,
            env: dict[str, str] | None = None) -> dict:
    """Run ``python -m module args`` on ``n_procs`` MPI processes; return rank 0's JSON line as a dict.

    ``env`` adds variables to the child environment (:func:`child_environment`). Raises
    :class:`MpiUnavailable` when there is no mpiexec or mpi4py, RuntimeError (led by every "rank N failed: ..." line
    a failing rank printed, then the tail of stderr) when the run fails or the processes did not join one
    communicator.
    """
    check_positive("timeout_s", timeout_s, finite=False)  # inf: wait as long as it takes
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise MpiUnavailable(
            "no mpiexec found next to Python or on PATH; install MPI with "
            "`pip install mpich mpi4py` (or your system's Open MPI)"
        )
    command = launch_command(mpiexec, mpi_flavor(mpiexec), n_procs, module, args)
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, env=child_environment(extra=env)
        )
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"mpiexec ran past {timeout_s:g} s: {' '.join(command)}") from exc
    if "No module named 'mpi4py'" in done.stderr:
        raise MpiUnavailable("mpi4py is not installed in this Python: pip install mpi4py")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        # A rank that fails says so in one line ("rank 1 failed: ValueError: ..."): those lines lead the message,
        # what a one-line summary of it shows, and stay when the other rank's traceback pushes them out of the tail.
        said = "".join(f"{line}\n" for line in done.stderr.splitlines()
                       if line.startswith("rank ") and " failed: " in line)
        raise RuntimeError(f"{said}mpiexec failed (exit {done.returncode}): {' '.join(command)}\n{done.stderr[-1500:]}")
    if len(lines) > 1:  # every process was its own rank 0: mpiexec and mpi4py's MPI do not match
        raise RuntimeError(
            f"{len(lines)} processes each ran alone: {mpiexec} does not match the MPI library "
            "mpi4py was built with (use the mpiexec of that MPI)"
        )
    result = json.loads(lines[0])
    if result.get("n_ranks") != n_procs:
        raise RuntimeError(f"asked for {n_procs} processes, the communicator had {result.get('n_ranks')}")
    return result
