"""Which earlier cells a graded exercise runs (``mlsys_lab.course.dependencies``): what a cell binds itself first
needs no earlier binding, so one learner's slow cell never joins another exercise's segment for a shared import."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsys_lab.course.dependencies import bound_first, needed_cells, reimports
from mlsys_lab.course.grade import exercise_segment, load_reference

LESSON = Path(__file__).resolve().parents[2] / "notebooks" / "00_start_here.ipynb"


@pytest.mark.parametrize(("source", "names"), [
    ("import numpy as np\n\ndef f(x):\n    return np.sum(x)\n", {"np", "f"}),
    ("from math import prod as p, sqrt\nimport os.path\n", {"p", "sqrt", "os"}),
    ("class Table:\n    def rows(self):\n        return Table()\n", {"Table"}),
    ("scale = 2.0\nlo, (hi, *rest) = 1, (2, 3)\nbudget: int = 4\n", {"scale", "lo", "hi", "rest", "budget"}),
    ("%matplotlib inline\nimport numpy as np\n", {"np"}),
    ("def f():\n    return f()\n", {"f"}),  # recursion: the body runs once f is bound
])
def test_bound_first_names_unconditional_top_level_bindings(source, names):
    """Does an import, def, class or plain assignment at top level, before any mention, count as bound first?"""
    assert bound_first(source) == names


@pytest.mark.parametrize(("source", "name"), [
    ("def f(x):\n    return np.sum(x)\n\nimport numpy as np\n", "np"),  # f may be called before the import
    ("y = np.pi\nimport numpy as np\n", "np"),
    ("try:\n    import cupy as np\nexcept ImportError:\n    pass\n", "np"),  # may not run
    ("if fast:\n    import numpy as np\n", "np"),
    ("x = x + 1\n", "x"),  # reads the earlier x
    ("table[0] = 1\n", "table"),  # mutates, does not bind
    ("import numpy as np\ndel np\n", "np"),
    ("def f(x=np.pi):\n    return x\nimport numpy as np\n", "np"),  # a default is evaluated at the def
    ("@cache\ndef cache():\n    pass\n", "cache"),
    ("def f(x)\n    return x\n", "f"),  # does not parse
])
def test_bound_first_keeps_what_may_need_an_earlier_binding(source, name):
    """Does a name read before its binding, bound conditionally, mutated or deleted still need its earlier cell?"""
    assert name not in bound_first(source)


def test_a_shared_import_is_no_dependency():
    """Do two exercise cells that both ``import numpy as np`` stay out of each other's segments?"""
    sources = ["import numpy as np",                                        # 0: the lesson's import
               "import numpy as np\nimport time\n\ndef slow(n):\n    time.sleep(n)\n    return np.zeros(n)\n",
               "import numpy as np\n\ndef fast(x):\n    return np.sum(x)\n"]  # 2: the graded exercise
    assert needed_cells(sources, 2, [sources[2]], frozenset({1})) == []
    # without its own import, np comes from the lesson's cell: the learner's cell only imports it again
    uses_lesson_np = "def fast(x):\n    return np.sum(x)\n"
    assert needed_cells([*sources[:2], uses_lesson_np], 2, [uses_lesson_np], frozenset({1})) == [0]
    assert needed_cells([*sources[:2], uses_lesson_np], 2, [uses_lesson_np]) == [1]  # both the lesson's: latest
    rebinds = ["import numpy as np", "import cupy as np", uses_lesson_np]  # a different module: the latest
    assert needed_cells(rebinds, 2, [uses_lesson_np], frozenset({1})) == [1]
    # the learner's helper cell is still needed when the exercise calls it (it imports its own np)
    calls_slow = "import numpy as np\n\ndef fast(x):\n    return slow(3) + np.sum(x)\n"
    assert needed_cells([*sources[:2], calls_slow], 2, [calls_slow], frozenset({1})) == [1]


def test_reimports_are_names_bound_only_by_one_kind_of_import():
    assert reimports("import numpy as np\nimport os.path\nfrom math import prod\n") == {
        "np": "import numpy", "os": "import os", "prod": "from math import prod"}
    assert reimports("import numpy as np\nnp = None\n") == {}
    assert reimports("import numpy as np\nimport cupy as np\n") == {}
    assert reimports("if x:\n    import numpy as np\n") == {}


def test_a_name_the_exercise_binds_is_not_looked_up_for_the_check():
    """Does the check cell, run after the exercise cell, read the learner's function from it, not from an earlier
    cell defining the same name?"""
    sources = ["def tensor_bytes(shape, dtype):\n    return 0\n", "def tensor_bytes(shape, dtype):\n    return 1\n"]
    check = "from mlsys_lab.exercises.start_here import check_tensor_bytes\ncheck_tensor_bytes(tensor_bytes)"
    assert needed_cells(sources, 1, [sources[1], check]) == []
    assert needed_cells(sources, 1, ["x = 1", check]) == [0]


def test_graded_segment_leaves_out_the_other_exercise_for_a_shared_import():
    """The issue's case on lesson 00: both submitted cells ``import numpy as np``; is tensor_bytes's slow cell
    left out of add_intensity's segment?"""
    reference = load_reference(LESSON)
    exercises = {e.name: e for e in reference.exercises}
    slow = ("import numpy as np\nimport time\n\ndef tensor_bytes(shape, dtype):\n    time.sleep(100)\n"
            "    return int(np.prod(shape)) * 2\n")
    fast = ("import numpy as np\n\ndef add_intensity(n, bytes_per_element):\n"
            "    return float(np.float64(1) / (3 * bytes_per_element))\n")
    segment = exercise_segment(reference, {"tensor_bytes": slow, "add_intensity": fast}, exercises["add_intensity"])
    assert slow not in [c.source for c in segment]
    assert fast in [c.source for c in segment]
