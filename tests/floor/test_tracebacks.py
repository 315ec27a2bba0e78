"""The learner's own line in a traceback (``mlsys_lab.tracebacks``), which the checks and the grader's worker name."""

from __future__ import annotations

import numpy as np

from mlsys_lab.tracebacks import is_learner_file, learner_line


def test_learner_line_is_the_innermost_frame_of_the_learners_code(tmp_path):
    """Is the line named the learner's (a file of theirs), not the library's frame below it?"""
    cell = tmp_path / "cell.py"
    cell.write_text("import numpy as np\n\ndef f(x):\n    return np.reshape(x, (5,))\n")
    namespace: dict = {}
    exec(compile(cell.read_text(), str(cell), "exec"), namespace)
    try:
        namespace["f"](np.arange(4))
    except ValueError as exc:
        assert learner_line(exc) == "line 4: return np.reshape(x, (5,))"
    assert is_learner_file(str(cell)) and not is_learner_file(np.__file__) and not is_learner_file("<string>")


def test_no_learner_frame_gives_no_line():
    try:
        int("x")
    except ValueError as exc:
        exc.__traceback__ = None
        assert learner_line(exc) == ""
