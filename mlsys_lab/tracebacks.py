"""Where in the learner's own code an exception was raised, for a failing verdict.

A verdict that says only "raised IndexError: index 8 is out of bounds" sends the learner hunting; one that
adds "at line 4: ``out[i + 1] = acc``" sends them to the line. The line is the innermost frame of the
traceback that is the learner's: not this package, not the standard library, not an installed package.
In a notebook that frame is a cell (IPython names it ``/tmp/ipykernel_<pid>/<hash>.py``), and the line
number counts from the top of the cell, which is what JupyterLab shows beside the code.

It sits on the shared floor: the checks (``exercises``) and the grader's worker (``course``) both use it,
and it imports nothing of the library.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
import traceback

_PACKAGE = os.path.dirname(os.path.abspath(__file__))  # mlsys_lab/
_NOT_LEARNER = tuple(
    os.path.abspath(p) + os.sep
    for p in {_PACKAGE, sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
              sysconfig.get_paths()["platlib"]}
    if p
)


def is_learner_file(filename: str) -> bool:
    """A frame of the learner's: a notebook cell, a script of theirs; not the course, Python or a library."""
    if filename.startswith("<") and not filename.startswith("<ipython-input"):
        return False  # <frozen ...>, <string> built by a library
    return not os.path.abspath(filename).startswith(_NOT_LEARNER)


def learner_line(exc: BaseException) -> str:
    """``"line 4: out[i + 1] = acc"`` for the innermost learner frame of ``exc``'s traceback, or ``""``."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_learner_file(f.filename)]
    if not frames:
        return ""
    frame = frames[-1]
    source = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
    text = f"line {frame.lineno}: {source}" if source else f"line {frame.lineno}"
    return text if len(text) <= 120 else text[:117] + "..."
