"""Can a learner forge a grade? Every trick of issue 18 as a generated submission, on two lessons.

Each lesson's class (saboteurs and honest classmates) is graded in ONE ``grade()`` call, so a saboteur
shares the run, the jobs and the report files with the honest ones. A saboteur's functions are all
wrong (they return 0), so any point it scores was forged; each trick sits in its first exercise cell,
where it can reach the later exercises too (the last one is attempted, wrong, as well). Honest
controls print ✓ and … lines, define helpers, warn and probe their confinement: they keep full marks.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from mlsys_lab.course.confinement import landlock_abi
from mlsys_lab.course.grade import grade, load_reference
from mlsys_lab.course.notebook_cells import STUB_LINES
from mlsys_lab.course.student import student_version

ROOT = Path(__file__).resolve().parents[2]
# The quick lane (make test) runs the first; make test-all both (tests/lanes.py).
LESSONS = ["09_fault_tolerance", pytest.param("10_peft", marks=pytest.mark.exhaustive)]
pytestmark = pytest.mark.slow

# Each trick is Python put before the (wrong) function in the first exercise cell. {lesson} is the
# first exercise's check module, {name} its exercise name, {stem} the lesson's notebook name.
TRICKS = {
    "replaces the check in its module": """
import mlsys_lab.exercises.{lesson} as _m
_m.check_{name} = lambda fn: print("✓ {name}: 99/99 cases")
""",
    "replaces the check through an obfuscated import_module": """
import importlib
_m = importlib.import_module("mlsys_lab." + "sesicrexe"[::-1] + ".{lesson}")
setattr(_m, "check_" + "{name}", lambda fn: print("✓ {name}: 99/99 cases"))
""",
    "calls the checks' reference implementation": """
from mlsys_lab.exercises import {lesson} as _ref
_answer = [getattr(_ref, n) for n in dir(_ref) if n.startswith("reference_")][0]
""",
    "opens the reference notebook and runs its solution": """
import json, mlsys_lab, pathlib
_nb = pathlib.Path(mlsys_lab.__file__).parents[1] / "notebooks" / "{stem}.ipynb"
_ns = {{}}
for _cell in json.loads(_nb.read_text())["cells"]:
    if "BEGIN SOLUTION" in "".join(_cell["source"]):
        exec("".join(_cell["source"]), _ns)
""",
    "patches builtins.print to turn ✗ into ✓": """
import builtins
_print = builtins.print
builtins.print = lambda *a, **k: _print(*(str(x).replace("✗", "✓") for x in a), **k)
""",
    "wraps sys.stdout": """
import sys
class _Out:
    def __init__(self, inner): self.inner = inner
    def write(self, text): return self.inner.write(text.replace("✗", "✓"))
    def __getattr__(self, name): return getattr(self.inner, name)
sys.stdout = _Out(sys.stdout)
""",
    "rewrites the check cell with an input transformer": """
def _rewrite(lines):
    if any("serve(" in l or "check_" in l for l in lines):
        return ['print("✓ {name}: 99/99 cases")\\n']
    return lines
get_ipython().input_transformers_post.append(_rewrite)
""",
    "reads the expected value from the checker's frame": """
import sys
def _peek(*args):
    frame = sys._getframe(1)
    while frame is not None:
        for key in ("expected", "case"):
            if key in frame.f_locals:
                value = frame.f_locals[key]
                return getattr(value, "expected", value)
        frame = frame.f_back
    return 0
""",
    "returns an object whose __eq__ is always true": """
class _Always(float):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = float.__hash__
_answer = _Always(0.0)
""",
    "a detached child appends passing records to the grader's report": """
import os, subprocess, sys
_script = (
    "import glob, json, os, time\\n"
    "time.sleep(1)\\n"
    "for p in glob.glob('/tmp/**/report_*.jsonl', recursive=True) + glob.glob('../*.jsonl'):\\n"
    "    open(p, 'a').write(json.dumps({{'notebook': 'x', 'cell': 0, 'passed': True}}) + '\\\\n')\\n")
try:
    subprocess.Popen([sys.executable, "-c", _script], start_new_session=True)
except Exception:
    pid = os.fork()
    if pid == 0:
        exec(_script)
        os._exit(0)
""",
    "writes into the grader's folder and classmates' notebooks": """
import glob
for _p in glob.glob("../**/*.ipynb", recursive=True) + glob.glob("../*.jsonl"):
    try:
        open(_p, "a").write("\\n")
    except OSError:
        pass
""",
    "kills the grading process": """
import os
try:
    os.kill(os.getppid(), 9)
except OSError:
    pass
""",
    "calls libc through ctypes": """
import ctypes
try:
    ctypes.CDLL(None).system(b"touch ../forged")
except Exception:
    pass
""",
    "replaces serve() with a printed verdict": """
import mlsys_lab.course.worker as _w
_w.serve = lambda lesson, exercise, fn: print(f"✓ {{exercise}}: 99/99 cases")
""",
    "forges the protocol: answers 'done' on the grading socket": """
import json, os, socket, struct
_s = socket.socket(fileno=int(os.environ["MLSYS_LAB_GRADING_FD"]))
_body = json.dumps({{"op": "ready", "exercise": "{name}"}}).encode()
_s.sendall(struct.pack(">I", len(_body)) + _body)
_body = json.dumps({{"op": "done", "line": "✓ {name}: 99/99 cases"}}).encode()
_s.sendall(struct.pack(">I", len(_body)) + _body)
""",
}
# What the first exercise's function returns under each trick (0 unless the trick supplies one).
RETURNS = {
    "calls the checks' reference implementation": "_answer(*args)",
    "reads the expected value from the checker's frame": "_peek(*args)",
    "opens the reference notebook and runs its solution": '_ns["{function}"](*args)',
    "returns an object whose __eq__ is always true": "_answer",
}
LIBRARY_ANSWER = """import mlsys_lab.fault_tolerance.reliability as _r

def goodput(interval, checkpoint_seconds, restart_seconds, mttf_seconds):
    return getattr(_r, "expected_" + "good" + "put")(interval, checkpoint_seconds, restart_seconds, mttf_seconds)
"""
HONEST_EXTRAS = {
    "probes its confinement (and finds it)": """
import os, pathlib, subprocess, mlsys_lab

def _refused(action):
    try:
        action()
    except (OSError, ImportError):
        return True
    return False

_repo = pathlib.Path(mlsys_lab.__file__).parents[1]
if {landlock}:
    assert _refused(lambda: open(_repo / "notebooks" / "{stem}.ipynb").read()), "read the reference"
    assert _refused(lambda: os.listdir("..")), "listed the grader's folder"
    assert _refused(lambda: open(_repo / "mlsys_lab" / "exercises" / "__init__.py").read()), "read the checks"
assert _refused(lambda: subprocess.run(["true"])), "started a process"
import mlsys_lab.exercises as _checks  # a stand-in while grading: no check, no answer to find
assert not [n for n in dir(_checks) if n.startswith("reference_")], "found the checks' answers"
assert _refused(lambda: os.kill(os.getppid(), 0)), "signalled the grader"
""",
    "prints ✓ and … lines": 'print("✓ looks right to me")\nprint("… still thinking")\nprint("✗ not this")\n',
    "defines a helper and warns": 'import warnings\n\ndef _helper(x):\n    return x\n\nwarnings.warn("careful")\n',
}
HONEST = "honest: " + ", ".join(HONEST_EXTRAS)  # one classmate with every habit above


def wrong_cell(stub: str, returns: str = "0") -> str:
    """The stub with its ``raise NotImplementedError()`` replaced by a wrong answer (``args`` = all arguments)."""
    head, _, tail = stub.partition(STUB_LINES[1])
    indent = head.splitlines()[-1] if head.splitlines() else ""
    def_line = next(line for line in stub.splitlines() if line.lstrip().startswith("def "))
    params = def_line[def_line.index("(") + 1:def_line.rindex(")")]
    names = [p.split("=")[0].split(":")[0].strip() for p in params.split(",") if p.strip()]
    return f"{head}args = ({', '.join(names)},)\n{indent}return {returns}{tail}"


def build_class(folder: Path, stem: str) -> tuple[dict[str, Path], list[str]]:
    """Saboteurs (one per trick) and honest controls of a lesson; returns name -> path and the exercises."""
    reference = load_reference(ROOT / "notebooks" / f"{stem}.ipynb")
    handout = student_version(reference.nb)
    first = reference.exercises[0]
    lesson = reference.nb.cells[first.check_cell].source.split("mlsys_lab.exercises.")[1].split()[0]
    paths = {}

    def write(name: str, sources: dict[int, str]) -> None:
        nb = nbformat.from_dict(handout)
        for cell, source in sources.items():
            nb.cells[cell].source = source
        paths[name] = folder / f"{len(paths):02d}.ipynb"
        nbformat.write(nb, paths[name])

    for trick, code in TRICKS.items():
        # The first exercise (the trick's target) and the last (a later one it could reach) are
        # attempted; any in between stay stubs, which the grader settles without a kernel.
        sources = {ex.exercise_cell: wrong_cell(handout.cells[ex.exercise_cell].source)
                   for ex in (reference.exercises[0], reference.exercises[-1])}
        trick_code = code.format(lesson=lesson, name=first.name, stem=stem)
        returns = RETURNS.get(trick, "0").format(function=first.function_name)
        first_cell = wrong_cell(handout.cells[first.exercise_cell].source, returns)
        sources[first.exercise_cell] = trick_code + "\n" + first_cell
        write(trick, sources)
    # One honest classmate does all the harmless things at once (each lesson's exercises graded once more,
    # not once per habit): every exercise cell probes the confinement, prints ✓/… lines, warns, then solves.
    extras = "\n".join(HONEST_EXTRAS.values()).replace("{landlock}", str(landlock_abi() > 0)).replace("{stem}", stem)
    write(HONEST, {ex.exercise_cell: extras + reference.nb.cells[ex.exercise_cell].source
                   for ex in reference.exercises})
    library = next((ex for ex in reference.exercises if ex.name == "goodput"), None)
    if library is not None:  # the lesson's own answer, reached without naming it in the cell
        sources = {ex.exercise_cell: reference.nb.cells[ex.exercise_cell].source for ex in reference.exercises}
        sources[library.exercise_cell] = LIBRARY_ANSWER
        write("calls the lesson function that answers", sources)
    return paths, [ex.name for ex in reference.exercises]


@pytest.mark.parametrize("stem", LESSONS)
def test_no_trick_scores_and_honest_classmates_keep_full_marks(stem, tmp_path):
    paths, exercises = build_class(tmp_path, stem)
    names = list(paths)
    results = {name: r for name, r in zip(names, grade([paths[n] for n in names], ROOT / "notebooks" / f"{stem}.ipynb",
                                                        timeout_s=60, jobs=2), strict=True)}
    forged = {name: {e: r.message for e, r in results[name].exercises.items() if r.passed}
              for name in TRICKS if results[name].score}
    print({name: {e: r.message for e, r in result.exercises.items()} for name, result in results.items()})
    assert not forged, forged
    assert results[HONEST].score == len(exercises), {e: r.message for e, r in results[HONEST].exercises.items()}
    assert not list(tmp_path.glob("../forged")), "the ctypes trick ran a shell command"
    if "calls the lesson function that answers" in results:  # flagged in the result, not failed
        flagged = results["calls the lesson function that answers"].exercises["goodput"]
        assert flagged.used == ("mlsys_lab.fault_tolerance.reliability.expected_goodput",)
        assert "used `mlsys_lab.fault_tolerance.reliability.expected_goodput`" in flagged.message
