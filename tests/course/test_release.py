"""Does a class release (``mlsys-lab release``) hold no answer, check what it can, and grade like the course?

Answers are found by their code, not their names: every function that answers an exercise in the full install
(the ``reference`` of each catalogue in ``tests/*/test_exercise_catalogue*.py``, with the test and check
functions it is built from, and every ``reference_*`` of the checks) and every solution region of the solved
notebooks is parsed, its identifiers renamed in order of appearance and its docstring dropped, and looked for
as a run of statements anywhere in the release's Python files and handout cells. The same search finds each of
them in the full install (the search works); it finds none in the release.
"""

from __future__ import annotations

import ast
import dis
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import CodeType, FunctionType

import nbformat
import pytest

from mlsys_lab.course.cli import main
from mlsys_lab.course.grade import grade
from mlsys_lab.course.notebook_cells import BEGIN_SOLUTION, END_SOLUTION, STUB_LINES, find_exercises
from mlsys_lab.course.release import grading_seed, write_release
from mlsys_lab.course.student import student_version

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ("start_here", "roofline")  # the release under test hands out two lessons; every module is generated
GRADED = ("00_start_here", "03_roofline")
SEED = 20240917
LESSON_PACKAGE = re.compile(r"^mlsys_lab\.(?!exercises\b|course\b)")  # lesson functions ship (library answers)


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("release") / "class"
    write_release(out, seed=SEED, slugs=LESSONS)
    return out


# ------------------------------------------------------------------ finding code by its shape
class _Normalise(ast.NodeTransformer):
    """Identifiers renamed v0, v1, ... in order of appearance (or all to "_"); docstrings and annotations dropped."""

    def __init__(self, erase: bool = False) -> None:
        self.erase, self.names = erase, {}

    def rename(self, name: str) -> str:
        return "_" if self.erase else self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        node.id = self.rename(node.id)
        return node

    def visit_arg(self, node):
        node.arg, node.annotation = self.rename(node.arg), None
        return node

    def visit_FunctionDef(self, node):
        node.name, node.returns, node.decorator_list = self.rename(node.name), None, []
        node.body = without_docstring(node.body) or [ast.Pass()]
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node):
        node.annotation = ast.Constant(None)
        self.generic_visit(node)
        return node


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    first = body[0] if body else None
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
        first.value.value, str)
    return body[1:] if docstring else list(body)


def shape(statements: list[ast.stmt], erase: bool = False) -> str:
    """The dump of a run of statements with consistent renaming (one namespace for the whole run)."""
    module = ast.Module(body=[ast.parse(ast.unparse(s)).body[0] for s in statements], type_ignores=[])
    return ast.dump(_Normalise(erase).visit(module))


def statement_lists(tree: ast.AST):
    for node in ast.walk(tree):
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


class Haystack:
    """Every run of statements of some Python sources, searchable by normalised shape; each is found as
    ``module:function`` (the top-level function or class holding it), or ``<cell>`` in a notebook."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.lists: list[tuple[str, list[ast.stmt], list[str]]] = []
        for where, source in sources.items():
            module = where.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            tree = ast.parse(source)
            for top in tree.body:
                name = getattr(top, "name", "<module>") if where.endswith(".py") else "<cell>"
                for stmts in [[top]] + list(statement_lists(top)):
                    self.lists.append((f"{module}:{name}", stmts, [shape([s], erase=True) for s in stmts]))

    def find(self, needle: list[ast.stmt]) -> list[str]:
        """Where a run of statements of the same normalised shape as ``needle`` occurs."""
        erased, exact, k = [shape([s], erase=True) for s in needle], shape(needle), len(needle)
        return [where for where, stmts, shapes in self.lists for i in range(len(stmts) - k + 1)
                if shapes[i:i + k] == erased and shape(stmts[i:i + k]) == exact]


def python_sources(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in root.rglob("*.py")}


def cell_sources(folder: Path) -> dict[str, str]:
    """Code cells of every notebook under ``folder`` (IPython magics and shell lines left out)."""
    out = {}
    for path in sorted(folder.rglob("*.ipynb")):
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
                out[f"{path.relative_to(folder)} cell {index}"] = "\n".join(lines)
    return out


# ------------------------------------------------------------------ what answers an exercise in the full install
def _loaded(code: CodeType) -> set[str]:
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF")}
    return names.union(*(_loaded(c) for c in code.co_consts if isinstance(c, CodeType)))


def catalogue_references() -> dict[str, FunctionType]:
    """Each catalogue's reference, by exercise (test modules loaded from their files, as pytest does)."""
    sys.path.insert(0, str(ROOT / "tests"))
    found = {}
    for path in sorted(ROOT.glob("tests/*/test_exercise_catalogue*.py")):
        spec = importlib.util.spec_from_file_location(f"_release_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found.update({c.name: c.reference for c in module.CATALOGUES})
    return found


def answer_functions() -> dict[str, FunctionType]:
    """The references and every test or check function they are built from; lesson functions excluded."""
    from mlsys_lab.course.release_record import answer_functions as check_answers

    todo = [*catalogue_references().values(), *check_answers().values()]
    found: dict[str, FunctionType] = {}
    while todo:
        fn = todo.pop()
        if not isinstance(fn, FunctionType) or LESSON_PACKAGE.match(fn.__module__):
            continue
        key = f"{fn.__module__}:{fn.__qualname__}"
        if key in found:
            continue
        if fn.__name__ != "<lambda>":  # a lambda reference only calls what it is built from
            found[key] = fn
        used = [fn.__globals__.get(n) for n in _loaded(fn.__code__)] + [c.cell_contents for c in fn.__closure__ or ()]
        todo += [f for f in used if isinstance(f, FunctionType)
                 and (f.__module__ == fn.__module__ or f.__module__.startswith("mlsys_lab.exercises."))]
    return found


def function_body(fn: FunctionType) -> list[ast.stmt]:
    node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    return without_docstring(node.body)


def solution_regions() -> dict[str, list[ast.stmt]]:
    """The text between the solution markers of every solved notebook, parsed."""
    regions = {}
    for path in sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for exercise in find_exercises(nb):
            source = nb.cells[exercise.exercise_cell].source
            pattern = rf"^[ \t]*{re.escape(BEGIN_SOLUTION)}\n(.*?)^[ \t]*{re.escape(END_SOLUTION)}"
            for number, text in enumerate(re.findall(pattern, source, re.MULTILINE | re.DOTALL)):
                try:
                    regions[f"{path.stem}: {exercise.name} #{number}"] = ast.parse(textwrap.dedent(text)).body
                except SyntaxError:  # a kernel exercise's CUDA C, inside its source string: the handout's stub
                    continue         # replaces it (no marker may ship), and its launcher's region is Python
    return regions


def delegates(body: list[ast.stmt]) -> bool:
    """``return f(a, b)``: the body only passes its arguments on; what it calls is searched itself (or is a lesson
    function), and the shape alone would match every such line of the library."""
    value = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    return isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute)) and all(
        isinstance(a, ast.Name) for a in [*value.args, *(k.value for k in value.keywords)])


def allowed(where: str) -> bool:
    """A lesson function that answers an exercise as it is ships with its lesson when the grader flags its use."""
    from mlsys_lab.course.library_answers import LIBRARY_ANSWERS

    return where in {target for targets in LIBRARY_ANSWERS.values() for target in targets}


def test_release_holds_no_reference_implementation_and_no_solution(release):
    """Is any answer of the full install, by its code, in a release .py or handout cell? (and the search works)"""
    answers = {key: function_body(fn) for key, fn in answer_functions().items()}
    answers.update(solution_regions())
    assert len(answers) > 100
    answers = {key: body for key, body in answers.items() if not delegates(body)}
    shipped = Haystack({**python_sources(release), **cell_sources(release / "notebooks")})
    leaked = {key: [w for w in shipped.find(body) if not allowed(w)] for key, body in answers.items()}
    assert not {k: v for k, v in leaked.items() if v}, "answers in the release"
    # The same search finds each check's answer functions in the full install's checks, and each solution in the
    # solved notebooks: it would see them if they had shipped.
    course = Haystack({**python_sources(ROOT / "mlsys_lab" / "exercises"), **cell_sources(ROOT / "notebooks")})
    missed = [k for k, body in answers.items() if (k.startswith("mlsys_lab.exercises") or ": " in k)
              and not course.find(body)]
    assert not missed


def test_release_is_the_handouts_and_an_installable_library_without_answer_keys(release):
    """Handouts at the course's paths, no solved notebook, tests, benchmarks or grader; pyproject installs it."""
    assert sorted(p.name for p in (release / "notebooks" / "student").iterdir()) == [f"{n}.ipynb" for n in GRADED]
    assert not list((release / "notebooks").glob("*.ipynb"))
    assert not (release / "tests").exists() and not (release / "benchmarks").exists()
    assert not (release / "mlsys_lab" / "course").exists()  # the grader and library_answers stay home
    text = "\n".join(p.read_text(encoding="utf-8") for p in release.rglob("*") if p.suffix in (".py", ".ipynb"))
    assert BEGIN_SOLUTION not in text and "colab.research.google.com" not in text
    pyproject = (release / "pyproject.toml").read_text()
    assert "[project.scripts]" not in pyproject and '"exercises/*.json"' in pyproject
    assert "notebooks/student/00_start_here.ipynb" in (release / "Makefile").read_text()
    record = json.loads((release / "mlsys_lab" / "exercises" / "recorded.json").read_text())
    assert record["seed"] == SEED and set(record["cannot_check"]) == {"measure_on_roofline"}


CHECKS = """
import numpy as np
from mlsys_lab.exercises.start_here import check_tensor_bytes
from mlsys_lab.exercises.roofline import check_classify_bound, check_measure_on_roofline, kernel_counts
from mlsys_lab.units import BYTES_PER_DTYPE

def placed(kernel, n, peak, bw):  # right counts (the release's record of them), a time of 1 microsecond
    sum(range(20_000))  # CPU time enough for the time claimed
    flop, n_bytes = kernel_counts(kernel, n)
    bound = "memory" if flop / n_bytes < peak / bw else "compute"
    return {"flop": flop, "bytes": n_bytes, "seconds": 1e-6, "flop_per_s": flop / 1e-6, "bound": bound,
            "attainable": min(peak, flop / n_bytes * bw)}

check_tensor_bytes(lambda shape, dtype: int(np.prod(shape)) * BYTES_PER_DTYPE[dtype])
check_tensor_bytes(lambda shape, dtype: int(np.prod(shape)) * 2)
check_classify_bound(lambda flop, traffic, peak, bw: (peak, "compute"))
check_measure_on_roofline(lambda kernel, n, peak, bw: {})
check_measure_on_roofline(placed)
"""


def test_release_checks_say_what_they_checked(release):
    """In the release: ✓/✗ on its fixed cases with the note; an exercise it cannot check says so."""
    env = {**os.environ, "PYTHONPATH": str(release), "MLSYS_LAB_CHECK_SEED": "1"}  # the release ignores the seed
    lines = subprocess.run([sys.executable, "-c", CHECKS], env=env, cwd=release, capture_output=True, text=True,
                           check=True, timeout=120).stdout.splitlines()
    note = "(the release checks {} fixed cases; your instructor grades hidden ones)"
    assert lines[0].startswith("✓ tensor_bytes: ") and lines[0].endswith(note.format(22))
    assert lines[1].startswith("✗ tensor_bytes: case 2 (shape=(7,), fp32): got 14, expected 28")
    assert lines[2].startswith("✗ classify_bound: case 1 ") and "fixed cases" in lines[2]
    assert lines[3].startswith("✗ measure_on_roofline: case 1 ")  # a wrong answer is wrong before any timing
    # a right one reaches the time budget, which needs the course's own kernels: not in a release
    assert lines[4] == "… measure_on_roofline: this release cannot check it here; your instructor grades it"


def hand_in(handout: nbformat.NotebookNode, solved: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The handout with each stub replaced by the solved notebook's solution text (exercise cells found by name)."""
    solutions = {e.name: solved.cells[e.exercise_cell].source for e in find_exercises(solved)}
    stub = re.compile(rf"^([ \t]*){re.escape(STUB_LINES[0])}\n[ \t]*{re.escape(STUB_LINES[1])}", re.MULTILINE)
    pattern = rf"^[ \t]*{re.escape(BEGIN_SOLUTION)}\n(.*?)^[ \t]*{re.escape(END_SOLUTION)}\n?"
    nb = nbformat.from_dict(handout)
    for exercise in find_exercises(nb):
        texts = iter(re.findall(pattern, solutions[exercise.name], re.MULTILINE | re.DOTALL))
        cell = nb.cells[exercise.exercise_cell]
        cell.source = stub.sub(lambda m, texts=texts: next(texts).rstrip("\n"), cell.source)
    return nb


@pytest.mark.slow
def test_hand_in_from_the_release_grades_like_one_from_the_course(release, tmp_path):
    """The same solutions, typed into the release's handout and into the course's, get the same grades."""
    results = {}
    with grading_seed(tmp_path / "seed"):  # hidden cases only the instructor's seed file knows
        for lesson in GRADED:
            solved = nbformat.read(ROOT / "notebooks" / f"{lesson}.ipynb", as_version=4)
            paths = []
            for origin, handout in (("release", nbformat.read(release / "notebooks" / "student" / f"{lesson}.ipynb",
                                                             as_version=4)),
                                    ("course", student_version(solved))):
                paths.append(tmp_path / f"{origin}_{lesson}.ipynb")
                nbformat.write(hand_in(handout, solved), paths[-1])
            results[lesson] = grade(paths, ROOT / "notebooks" / f"{lesson}.ipynb", jobs=2, timeout_s=60)
    for lesson, (from_release, from_course) in results.items():
        assert from_release.to_json()["exercises"] == from_course.to_json()["exercises"], lesson
        not_here = [name for name, e in from_release.exercises.items() if e.needs_elsewhere]  # a CUDA GPU
        assert from_release.score == from_release.max_score and from_release.not_graded == not_here, [
            e.message for e in from_release.exercises.values()]


def test_release_command_refuses_a_folder_in_use(tmp_path, capsys):
    """`mlsys-lab release DIR` writes only into a new or empty folder, and names the lessons it knows."""
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    assert main(["release", str(tmp_path / "used")]) == 2
    assert main(["release", str(tmp_path / "new"), "--lessons", "99_nothing"]) == 2
    assert "not empty" in capsys.readouterr().err and not (tmp_path / "new").exists()


def test_grading_seed_file_is_written_once_and_kept(tmp_path, monkeypatch):
    """A missing seed file gets a private random seed; the same file gives the same seed; the variable is restored."""
    monkeypatch.delenv("MLSYS_LAB_CHECK_SEED", raising=False)
    path = tmp_path / "grading.seed"
    with grading_seed(path) as first:
        assert os.environ["MLSYS_LAB_CHECK_SEED"] == str(first)
    assert "MLSYS_LAB_CHECK_SEED" not in os.environ and path.stat().st_mode & 0o077 == 0
    with grading_seed(path) as second:
        assert second == first
    path.write_text("not a seed")
    with pytest.raises(ValueError, match="one non-negative integer"), grading_seed(path):
        pass
