"""While grading, a learner's own ``check_<name>(fn)`` call gets a stand-in that says the grader checks it.

Handouts end each exercise with a check cell, and some learners copy the call into their exercise cell. In a
graded worker the real checks (and the answers they are built on) are out of reach, so that import would raise
and cost an honest learner the point. The worker serves these stand-in modules for ``mlsys_lab.exercises`` and
its submodules instead: each ``check_<name>`` prints one line and returns; nothing else is there.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import types
from typing import Any

PACKAGE = "mlsys_lab.exercises"


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("check_"):
            def stand_in(*args: Any, **kwargs: Any) -> None:
                print(f"… {name.removeprefix('check_')}: checked by the grader, not in your cell, while grading")
            return stand_in
        raise AttributeError(f"{self.__name__}.{name}: the checks and their answers are not importable while grading")


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        # The package and its lesson modules; a deeper name (``from <lesson module> import helper`` looks for a
        # submodule ``helper`` once the attribute is refused) is not found, so the learner reads an ImportError.
        lesson_module = fullname.startswith(PACKAGE + ".") and fullname.count(".") == PACKAGE.count(".") + 1
        if fullname == PACKAGE or lesson_module:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StandIn(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> None:
    """Serve the stand-ins from now on in this process (a graded worker's start)."""
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    sys.meta_path.insert(0, _StandInFinder())
