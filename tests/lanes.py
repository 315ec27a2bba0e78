"""Two lanes of one suite: ``make test`` (the quick lane, for every change) and ``make test-all`` (``--exhaustive``).

Every test file runs in both lanes. The quick lane leaves out repetitions of what it shows once:

* tests marked ``@pytest.mark.exhaustive`` are deselected: every lesson graded in full and the red team on a
  second lesson (one each stays), every handout in the browser (one stays), the start page in full and a missing
  widget frontend in the browser, a class graded again with its jobs oversubscribed, the Binder pins resolved
  against the package index (their equality with pyproject's is checked offline in both lanes);
* the wrong-answer catalogues (``tests/catalogue.py``) run every reference and every wrong implementation on the
  first :data:`QUICK_SEEDS` seeds instead of all of them (tests that take the :func:`catalogue_seeds` fixture).

``--exhaustive`` runs everything, as CI does (``.ci/run``). A test named by its id (``file.py::test[param]``) or
selected with ``-m exhaustive`` runs in either lane. The quick lane's summary says what it left out.

Loaded for every run through ``-p lanes`` in ``pyproject.toml``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

QUICK_SEEDS = 5
MARKER = "exhaustive"
_KEY = "mlsys_lab_lanes"
_STASH = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--exhaustive", action="store_true", default=False,
                     help="the exhaustive lane (make test-all): run the tests marked exhaustive and every seed of "
                          "the wrong-answer catalogues")


def exhaustive(config: pytest.Config) -> bool:
    """The exhaustive lane: ``--exhaustive``, or ``-m exhaustive`` (which would otherwise select nothing)."""
    markexpr = config.getoption("markexpr") or ""
    return config.getoption("exhaustive") or (MARKER in markexpr and f"not {MARKER}" not in markexpr)


@pytest.fixture
def catalogue_seeds(request: pytest.FixtureRequest):
    """How many of a catalogue's seeds to run: None (all of them) in the exhaustive lane, else QUICK_SEEDS."""
    return None if exhaustive(request.config) else QUICK_SEEDS


def _named(item: pytest.Item, config: pytest.Config) -> bool:
    """Was the test named on the command line by its id (not only its file or folder)?"""
    root = Path(config.rootpath)
    for arg in config.args:
        if "::" not in arg:
            continue
        path, _, rest = arg.partition("::")
        try:
            path = Path(path).resolve().relative_to(root).as_posix()
        except ValueError:
            continue
        if item.nodeid == f"{path}::{rest}" or item.nodeid.startswith(f"{path}::{rest}["):
            return True
    return False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    quick = not exhaustive(config)
    left_out = [item for item in items if quick and item.get_closest_marker(MARKER) and not _named(item, config)]
    if left_out:
        kept = set(map(id, left_out))
        items[:] = [item for item in items if id(item) not in kept]
        config.hook.pytest_deselected(items=left_out)
    counts = {"deselected": len(left_out), "fewer_seeds": sum("catalogue_seeds" in getattr(item, "fixturenames", ())
                                                              for item in items) if quick else 0}
    config.stash[_STASH] = counts
    if hasattr(config, "workeroutput"):  # an xdist worker: the controller prints the summary
        config.workeroutput[_KEY] = counts


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist's controller collects nothing itself: it takes the counts from its workers (all collect the same)."""
    counts = getattr(node, "workeroutput", {}).get(_KEY)
    if counts:
        config = node.config
        config.stash[_STASH] = {k: max(v, config.stash.get(_STASH, {}).get(k, 0)) for k, v in counts.items()}


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or exhaustive(config):
        return
    counts = config.stash.get(_STASH, {})
    parts = []
    if counts.get("deselected"):
        n = counts["deselected"]
        parts.append(f"deselected {n} test{'s' * (n != 1)} marked exhaustive")
    if counts.get("fewer_seeds"):
        parts.append(f"ran {counts['fewer_seeds']} catalogue tests on their first {QUICK_SEEDS} seeds only")
    if parts:
        terminalreporter.write_line(f"quick lane: {' and '.join(parts)}; `make test-all` (--exhaustive) runs "
                                    "them all", yellow=True, bold=True)
