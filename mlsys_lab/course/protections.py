"""Which protections of a grading worker hold on this machine, seen from outside (:func:`probe_protections`).

The probe is a process confined exactly as a worker is (:mod:`mlsys_lab.course.confinement`), running only this
module's code: it tries to read a file outside its folder, dial a TCP port, fork, and find a variable of the
grader's environment, and reports what stopped it. ``mlsys-lab grade --self-test`` prints the report, and
``--require-confinement`` refuses to grade unless every protection held.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mlsys_lab.course.confinement import EACCES, EPERM, landlock, network_namespace, seccomp, worker_environment

PROBE_CHECKS = ("files", "network", "processes", "environment")


def probe_protections(timeout_s: float = 60.0) -> dict[str, dict]:
    """Start a confined process like a worker and have it try what a worker must not do.

    Returns ``{layer: {"held": bool, "detail": str}}`` for :data:`PROBE_CHECKS`, as seen from the outside:
    the probe's report is this module's own code running in the confined process, with no learner code.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="mlsys_lab_probe_") as folder:
        secret = os.path.join(os.path.dirname(folder), f"mlsys_lab_probe_secret_{os.getpid()}")
        with open(secret, "w") as f:
            f.write("secret")
        try:
            env = worker_environment({}, base={**os.environ, "GRADER_TOKEN_PROBE": "a secret"})
            done = subprocess.run([sys.executable, "-m", "mlsys_lab.course.protections", "--probe", secret],
                                  cwd=folder, env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        finally:
            os.unlink(secret)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {name: {"held": False, "detail": f"the probe failed: {detail}"} for name in PROBE_CHECKS}
    return json.loads(lines[-1])


def _probe_main(secret: str) -> None:
    """The confined side of :func:`probe_protections` (``python -m mlsys_lab.course.protections --probe SECRET``)."""
    import socket

    steps = {"network namespace": network_namespace(), "landlock": landlock(os.getcwd(), []),
             "seccomp": seccomp("unix")}
    report: dict[str, dict] = {}
    try:
        open(secret).read()
        files = (False, "read a file outside the worker's folder")
    except OSError:
        files = (True, steps["landlock"][1])
    report["files"] = {"held": files[0], "detail": files[1]}
    try:
        sock = socket.create_connection(("127.0.0.1", 9), timeout=2)
        sock.close()
        network = (False, "connected to 127.0.0.1")
    except OSError as exc:  # refused by seccomp (EACCES), Landlock, or no route in an empty namespace
        held = [text for ok, text in (steps["seccomp"], steps["network namespace"]) if ok]
        dialled = exc.errno not in (EACCES, EPERM, 101)  # refused by a listener: the network was reachable
        network = (bool(held) or not dialled, "; ".join(held) or (f"dialled 127.0.0.1 ({exc.strerror})" if dialled
                                                                 else f"connect failed: {exc}"))
    report["network"] = {"held": network[0], "detail": network[1]}
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        processes = (False, "forked a child process")
    except OSError:
        processes = (True, steps["seccomp"][1])
    report["processes"] = {"held": processes[0], "detail": processes[1]}
    leaked = [name for name in os.environ if "TOKEN" in name]
    report["environment"] = {"held": not leaked, "detail": "minimal environment" if not leaked
                             else f"inherited {leaked}"}
    print(json.dumps(report))


if __name__ == "__main__" and sys.argv[1:2] == ["--probe"]:
    _probe_main(sys.argv[2])
