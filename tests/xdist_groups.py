"""How the suite is shared between pytest-xdist workers (``make test``, ``make test-all``: ``-n 2 --dist loadfile``).

Under ``--dist loadfile`` every test runs on one worker with the rest of its file: a file's module fixtures
are built once, and a notebook's cells run in order in one kernel. This plugin refines that in two ways:

* the files in :data:`SPREAD` are split test by test: their tests are long and independent of each other
  (a lesson graded, a handout run in the browser, a wrong implementation over 50 seeds), and whole they would
  keep one worker busy for minutes while the other idles;
* the longest work is handed out first (:data:`FIRST`), so that the run does not end with one worker on a
  three-minute test and the other done.

Loaded for every run through ``-p xdist_groups`` in ``pyproject.toml``; without ``-n`` only the order applies.
"""

from __future__ import annotations

from fnmatch import fnmatch

import pytest

try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest without xdist: only the order below applies
    LoadScopeScheduling = object

SPREAD = (
    "tests/browser/test_notebooks_in_browser.py",
    "tests/course/test_grade_every_lesson.py",
    "tests/course/test_grade_red_team.py",
    "tests/*/test_exercise_catalogue.py",
)
# Longest first (measured on a 2-core machine): minutes, then tens of seconds.
FIRST = (
    "tests/fuzz/test_fuzz.py",
    "tests/course/test_grade_red_team.py",
    "tests/browser/test_notebooks_in_browser.py",
    "tests/course/test_grade_every_lesson.py",
    "tests/loops/test_matmul.py",
    "tests/course/test_binder.py",
    "tests/course/test_grade.py",
    "notebooks/02_loops.ipynb",
    "notebooks/11_moe.ipynb",
    "tests/*/test_exercise_catalogue.py",
)


def _matches(path: str, patterns: tuple[str, ...]) -> int | None:
    return next((i for i, pattern in enumerate(patterns) if fnmatch(path, pattern)), None)


def scope_of(nodeid: str) -> str:
    """The unit of work a worker takes: one test in a SPREAD file, otherwise its whole file."""
    path = nodeid.split("::", 1)[0]
    return nodeid if _matches(path, SPREAD) is not None else path


class SpreadFileScheduling(LoadScopeScheduling):
    """``--dist loadfile``, except that the tests of SPREAD files are scheduled one by one, and the work is
    handed out in collection order (longest first, see below) rather than xdist's default order of scopes by
    their number of tests, which would leave the one-test scopes of the longest tests for the end."""

    def __init__(self, config: pytest.Config, log=None) -> None:
        super().__init__(config, log)
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") == "loadfile":
        return SpreadFileScheduling(config, log)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (a stable sort: the order inside a file, a notebook's cells, is kept)."""
    def rank(item: pytest.Item) -> int:
        index = _matches(item.nodeid.split("::", 1)[0], FIRST)
        return len(FIRST) if index is None else index
    items.sort(key=rank)
