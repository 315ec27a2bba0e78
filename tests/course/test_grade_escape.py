"""Can a hand-in reach past its exercise: into the grading process, the machine, the network, the next classmate?

Each attack of issue 28 is a generated submission; its first exercise holds the attack, its second the honest
solution, so that every attack must cost exactly one exercise. After grading, the test looks from the outside:
no file the attack aimed at, no connection on the listener it dialled, no secret in any message, no process
left, and the honest exercise's point kept.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course import protections
from mlsys_lab.course.grade import grade
from mlsys_lab.course.notebook_cells import find_exercises
from mlsys_lab.course.student import student_version

ROOT = Path(__file__).resolve().parents[2]
START_HERE, COLLECTIVES = ROOT / "notebooks" / "00_start_here.ipynb", ROOT / "notebooks" / "07_collectives.ipynb"
SECRET = "tok-3f9a1c7e"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not protections.probe_protections()["processes"]["held"],
                                                   reason="this machine offers no seccomp filter")]

HONEST_INTENSITY = "def add_intensity(n, bytes_per_element):\n    return n / (3 * n * bytes_per_element)\n"
HONEST_BYTES = ("B = {'fp64': 8, 'fp32': 4, 'bf16': 2, 'fp16': 2, 'fp8': 1, 'int8': 1, 'int4': 0.5}\n\n"
                "def tensor_bytes(shape, dtype):\n    n = 1\n    for d in shape:\n        n *= d\n"
                "    return n * B[dtype]\n")
# 3 s of CPU on the first call (the check calls the function once per case).
BURN = ("import time\n_burned = []\n\ndef _burn(seconds):\n    end = time.process_time() + seconds * (not _burned)\n"
        "    _burned.append(1)\n    while time.process_time() < end:\n        pass\n\n")

# Lesson 00: the attack sits in tensor_bytes (it raises what it found, so that the message carries it).
ATTACKS = {
    "prints the environment (a token, the check seed)": """
import os
def tensor_bytes(shape, dtype):
    raise ValueError(os.environ.get("INSTRUCTOR_API_TOKEN", "-") + os.environ.get("MLSYS_LAB_CHECK_SEED", "-"))
""",
    "reads /etc/shadow and the reference notebook": """
import pathlib
def tensor_bytes(shape, dtype):
    found = []
    for path in ["/etc/shadow", "{reference}"]:
        try:
            found.append("read:" + pathlib.Path(path).read_text()[:20])
        except OSError as exc:
            found.append(type(exc).__name__)
    raise ValueError(" ".join(found))
""",
    "dials a TCP port of the grader's machine": """
import socket
def tensor_bytes(shape, dtype):
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"{secret}")
    except OSError as exc:
        raise ValueError(f"refused: {{exc}}")
    return 0
""",
    "dials a Unix socket outside its folder": """
import socket
def tensor_bytes(shape, dtype):
    s = socket.socket(socket.AF_UNIX)
    s.connect("{unix}")
    s.sendall(b"{secret}")
    return 0
""",
    "turns off the audit hook, forks and calls setsid": """
import os, time
import mlsys_lab.course.worker as _w
_w._armed[0] = False
def tensor_bytes(shape, dtype):
    pid = os.fork()
    if pid == 0:
        os.setsid()
        time.sleep(120)
        os._exit(0)
    return 0
""",
    "fork bomb": """
import os
import mlsys_lab.course.worker as _w
_w._armed[0] = False
def tensor_bytes(shape, dtype):
    while True:
        os.fork()
""",
    "ignores SIGXCPU and spins": """
import signal
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
def tensor_bytes(shape, dtype):
    while True:
        pass
""",
    "raises its own CPU limit": """
import resource
import mlsys_lab.course.worker as _w
_w._armed[0] = False
def tensor_bytes(shape, dtype):
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except ValueError:  # refused: spin anyway
        pass
    while True:
        pass
""",
    "answers with ten million numbers": """
def tensor_bytes(shape, dtype):
    return list(range(10_000_000))
""",
}


def _submissions(folder: Path, reference: nbformat.NotebookNode, cells: dict[str, str],
                 others: str = "") -> dict[str, Path]:
    handout = student_version(reference)
    exercises = find_exercises(reference)
    paths = {}
    for number, (name, source) in enumerate(cells.items()):
        nb = nbformat.from_dict(handout)
        nb.cells[exercises[0].exercise_cell].source = source
        if others:
            nb.cells[exercises[1].exercise_cell].source = others
        paths[name] = folder / f"attack_{number:02d}.ipynb"
        nbformat.write(nb, paths[name])
    return paths


def _survivors(folder: Path) -> list[int]:
    """Processes whose working folder lies under ``folder`` (every worker works in a folder of the run)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder) in os.readlink(entry / "cwd"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


class _Listener:
    """A TCP and a Unix listener that record whatever connects."""

    def __init__(self, unix_path: Path) -> None:
        self.received: list[str] = []
        self.tcp = socket.create_server(("127.0.0.1", 0))
        self.unix = socket.socket(socket.AF_UNIX)
        self.unix.bind(str(unix_path))
        self.unix.listen()
        self.port = self.tcp.getsockname()[1]
        for server in (self.tcp, self.unix):
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                connection, _ = server.accept()
            except OSError:
                return
            self.received.append(connection.recv(100).decode(errors="replace") or "(connected)")


def test_no_attack_reaches_the_grader_the_machine_or_the_network(tmp_path, monkeypatch):
    monkeypatch.setenv("INSTRUCTOR_API_TOKEN", SECRET)
    monkeypatch.setenv("MLSYS_LAB_CHECK_SEED", "424242")
    listener = _Listener(tmp_path / "grader.sock")
    folder = tmp_path / "class"
    folder.mkdir()
    cells = {name: source.format(port=listener.port, unix=tmp_path / "grader.sock", secret=SECRET,
                                 reference=START_HERE) for name, source in ATTACKS.items()}
    honest_bytes = BURN + HONEST_BYTES.replace("    return n", "    _burn(3)\n    return n")
    cells["honest, 3 s of CPU in each exercise"] = honest_bytes
    cells["honest, runs the check in its own cell"] = (HONEST_BYTES + "\nfrom mlsys_lab.exercises.start_here import "
                                                       "check_tensor_bytes\ncheck_tensor_bytes(tensor_bytes)\n")
    reference = nbformat.read(START_HERE, as_version=4)
    paths = _submissions(folder, reference, cells, others=BURN + HONEST_INTENSITY.replace(
        "    return n", "    _burn(3)\n    return n"))
    results = grade(list(paths.values()), START_HERE, timeout_s=20, jobs=2, cpu_seconds=4.5)
    by_name = {name: result for name, result in zip(paths, results, strict=True)}
    messages = {name: r.exercises["tensor_bytes"].message for name, r in by_name.items()}

    problems = []  # every class of attack that got through, so that one run shows them all
    if listener.received:
        problems.append(f"connections reached the grader's machine: {listener.received}")
    if _survivors(tmp_path):
        problems.append("a worker's process outlived grading")
    for name, result in by_name.items():
        if not result.exercises["add_intensity"].passed:
            problems.append(f"{name}: the honest exercise lost its point: {result.exercises['add_intensity'].message}")
        if SECRET in messages[name] or "424242" in messages[name]:
            problems.append(f"{name}: a secret reached the feedback: {messages[name]}")
        if result.exercises["tensor_bytes"].passed != name.startswith("honest"):
            problems.append(f"{name}: tensor_bytes {'passed' if result.exercises['tensor_bytes'].passed else 'failed'}"
                            f": {messages[name]}")
    read = messages["reads /etc/shadow and the reference notebook"]
    if "raised ValueError: PermissionError PermissionError" not in read:
        problems.append(f"files outside the worker's folder were read: {read}")
    if "raised ValueError: --" not in messages["prints the environment (a token, the check seed)"]:
        problems.append(f"the worker inherits the grader's environment: {messages[next(iter(ATTACKS))]}")
    for name in ("ignores SIGXCPU and spins", "raises its own CPU limit"):
        if "CPU time limit exceeded" not in messages[name]:
            problems.append(f"{name}: {messages[name]}")
    assert not problems, "\n".join(problems)


# Lesson 07: the check hands the learner a simulated network; only its exchange may be used, and only with numbers.
REFERENCE_ATTACKS = {
    "exchanges bytes and writes a file through what comes back": """
def ring_allreduce(buffers, net):
    got = net.exchange([(0, 1, b"payload")])
    got[0].tofile("{target}")
    return buffers
""",
    "reaches private attributes and the class": """
def ring_allreduce(buffers, net):
    for name in ["__class__", "__dict__", "_MarkingNetwork__init__", "pairs", "bytes_sent", "__reduce__"]:
        try:
            getattr(net, name)
        except AttributeError:
            pass
    net.exchange.__globals__["open"]("{target}", "w").write("x")
    return buffers
""",
    "sends the grader raw requests for other operations": """
from mlsys_lab.course import wire
from mlsys_lab.course.worker import _channel
def ring_allreduce(buffers, net):
    sock = _channel()
    for name in ["__init__", "__reduce_ex__", "tofile", "__setattr__"]:
        wire.send_message(sock, {{"op": "call", "ref": 0, "name": name, "args": ["{target}"], "kwargs": {{}}}})
        wire.receive_message(sock)
    return buffers
""",
}


def test_grader_side_objects_offer_only_their_exercise_operations(tmp_path):
    target = tmp_path / "written_by_the_grader"
    folder = tmp_path / "class"
    folder.mkdir()
    cells = {name: source.format(target=target) for name, source in REFERENCE_ATTACKS.items()}
    reference = nbformat.read(COLLECTIVES, as_version=4)
    paths = _submissions(folder, reference, cells)
    results = grade(list(paths.values()), COLLECTIVES, timeout_s=60, jobs=2)
    assert not target.exists(), "the grading process wrote a file a hand-in named"
    for name, result in zip(paths, results, strict=True):
        assert not result.exercises["ring_allreduce"].passed, (name, result.exercises["ring_allreduce"].message)
    assert not _survivors(tmp_path)
