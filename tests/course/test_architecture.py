"""The layout the architecture note promises (ARCHITECTURE.md), checked on the source tree.

* every lesson slug names its notebook, package, widgets module, exercises module and tests folder;
* imports go one way: the shared floor and the kernels never import a lesson package; lesson packages
  never import widgets, exercises or course tools; widgets never import exercises or course tools;
  exercises (the checks) never import widgets or course tools (the grader);
  nothing in the library imports a module by a string;
* each public function or class is defined once in the library;
* widgets only draw: their public functions are ``plot_*``/``draw_*``, their classes explorers;
* no module is longer than 400 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "mlsys_lab"
FLOOR = {"backend", "timing", "hardware", "validation", "units", "records", "nn", "mpi", "cpu", "tracebacks", "pieces",
         "argument_changes", "occupancy"}
TOOLS = {"widgets", "exercises", "course"}
SLUGS = sorted(p.stem.split("_", 1)[1] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_LINES = 400

# Names that two library modules define on purpose, with the reason.
_ENGINES = ("an operator of two engines: the graph IR's traced op (operators.functional) and the autodiff "
            "engine's tape op (training_memory.autodiff), both named as NumPy names it; nn holds the array version")
_TENSOR_COLLECTIVE = ("lesson 08's tensor interface (an axis, a CommLog) over lesson 07's simulated collective "
                      "of the same name, which it calls")
SAME_NAME_ON_PURPOSE: dict[str, str] = {
    "main": "the entry point of each module run as `python -m` (runners under mpiexec, the command line)",
    "matmul": _ENGINES, "relu": _ENGINES, "tanh": _ENGINES, "mse_loss": _ENGINES, "gelu": _ENGINES,
    "softmax": _ENGINES,
    "all_gather": _TENSOR_COLLECTIVE, "all_to_all": _TENSOR_COLLECTIVE, "reduce_scatter": _TENSOR_COLLECTIVE,
}


def modules() -> list[Path]:
    return sorted(p for p in LIBRARY.rglob("*.py") if "__pycache__" not in p.parts)


def dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(name: str) -> str:
    """'floor', 'kernels', 'lesson', 'widgets', 'exercises', 'course' or 'package' for a dotted module name."""
    parts = name.split(".")
    if len(parts) == 1:
        return "package"
    head = parts[1]
    if head in FLOOR:
        return "floor"
    if head in TOOLS or head == "kernels":
        return head
    if head == "data":
        return "data"
    return "lesson"


def imported_modules(path: Path) -> set[str]:
    """Every ``mlsys_lab`` module that ``path`` imports (``from mlsys_lab import x`` counts as ``mlsys_lab.x``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mlsys_lab")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mlsys_lab"):
            found.add(node.module)
            if node.module in ("mlsys_lab", "mlsys_lab.kernels"):
                found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def imports_by_string(path: Path) -> list[str]:
    calls = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                calls.append(f"line {node.lineno}")
    return calls


@pytest.mark.parametrize("slug", SLUGS)
def test_every_lesson_slug_names_all_its_places(slug):
    """Does each lesson have its package, widgets, exercises and tests under the notebook's slug?"""
    assert (LIBRARY / slug / "__init__.py").is_file(), f"mlsys_lab/{slug}/ is missing"
    docstring = ast.get_docstring(ast.parse((LIBRARY / slug / "__init__.py").read_text()))
    assert docstring, f"mlsys_lab/{slug}/__init__.py has no docstring saying what each module is for"
    assert (LIBRARY / "widgets" / f"{slug}.py").is_file(), f"mlsys_lab/widgets/{slug}.py is missing"
    assert (LIBRARY / "exercises" / f"{slug}.py").is_file(), f"mlsys_lab/exercises/{slug}.py is missing"
    assert list((ROOT / "tests" / slug).glob("test_*.py")), f"tests/{slug}/ has no tests"


def test_slugs_are_the_twelve_lessons_and_the_capstone():
    assert len(SLUGS) == 13 and "start_here" in SLUGS and "capstone" in SLUGS


def test_every_kernel_folder_is_a_lesson():
    """Do kernel sources and launchers live in kernels/<slug>/, never loose in kernels/ (where only the plumbing
    every lesson's launchers share sits: compiling, ``loader`` and ``learner``, and launching, ``launch`` and the
    TMA tensor maps of the Hopper kernels, ``tma``)?"""
    folders = {p.name for p in (LIBRARY / "kernels").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= set(SLUGS), f"kernel folders that are not lessons: {folders - set(SLUGS)}"
    assert not list((LIBRARY / "kernels").glob("*.cu"))
    # The plumbing: compiling the course's sources (loader) and a learner's (learner), launching (launch, tma).
    loose = {p.stem for p in (LIBRARY / "kernels").glob("*.py")} - {"__init__", "loader", "learner", "launch", "tma"}
    assert not loose, f"launchers outside kernels/<slug>/: {loose}"


def test_imports_go_one_way():
    """Floor and kernels import no lesson; lessons import no tools; widgets and exercises import no course
    (nor each other)."""
    forbidden = {
        "floor": {"lesson", "kernels", "widgets", "exercises", "course"},
        "kernels": {"lesson", "widgets", "exercises", "course"},
        "lesson": {"widgets", "exercises", "course"},
        "widgets": {"exercises", "course"},
        # The checks judge; the grader runs them. A check that imports the grader runs back up the layers.
        "exercises": {"widgets", "course"},
    }
    wrong = []
    for path in modules():
        here = layer(dotted(path))
        for name in imported_modules(path):
            there = layer(name)
            if there in forbidden.get(here, set()):
                wrong.append(f"{dotted(path)} ({here}) imports {name} ({there})")
    assert not wrong, "\n".join(wrong)


def test_nothing_imports_by_string():
    wrong = {dotted(p): calls for p in modules() if (calls := imports_by_string(p))}
    assert not wrong, wrong


def public_definitions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.name for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and not n.name.startswith("_")]


def test_each_public_function_or_class_is_defined_once():
    """Is every concept defined in one module (re-exports are fine; a second definition is not)?"""
    where: dict[str, list[str]] = {}
    for path in modules():
        for name in public_definitions(path):
            where.setdefault(name, []).append(dotted(path))
    twice = {name: places for name, places in where.items()
             if len(places) > 1 and name not in SAME_NAME_ON_PURPOSE}
    assert not twice, "\n".join(f"{name}: {', '.join(places)}" for name, places in sorted(twice.items()))


def test_widgets_only_draw():
    """Widget modules hold explorers and plot_/draw_ functions; what they compute lives in a lesson package."""
    wrong = []
    for path in sorted((LIBRARY / "widgets").glob("*.py")):
        if path.stem in ("__init__", "base"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                if not node.name.startswith(("plot_", "draw_")):
                    wrong.append(f"widgets/{path.name}: function {node.name}")
            elif isinstance(node, ast.ClassDef) and not node.name.endswith("Explorer"):
                wrong.append(f"widgets/{path.name}: class {node.name}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(LIBRARY)))
def test_module_is_short(path):
    n_lines = len(path.read_text().splitlines())
    assert n_lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {n_lines} lines (at most {MAX_LINES})"
