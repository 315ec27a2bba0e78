"""Does every check judge the value a learner returns, not its Python type?

An honest answer computed with NumPy comes back as ``np.int64(33554432)``, ``np.float64(0.25)``,
``np.True_`` or a 0-d array, not as ``int``, ``float`` or ``bool``. Each exercise's reference (from its
catalogue, ``tests/<slug>/test_exercise_catalogue.py``) is wrapped to return NumPy types wherever it returns a
number, and must still pass. The bool-versus-number line is kept: ``True`` is still not ``1``.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from catalogue import Catalogue, verdict

from mlsys_lab.exercises import PASS, close_enough

ROOT = Path(__file__).resolve().parents[2]
SEEDS = range(3)  # the catalogues prove 50 seeds; the type of a number does not depend on the seed


def _catalogues() -> list[Catalogue]:
    found = []
    for path in sorted(ROOT.glob("tests/*/test_exercise_catalogue*.py")):
        spec = importlib.util.spec_from_file_location(f"numpy_scalars_{path.parent.name}_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        found += getattr(module, "CATALOGUES", [])
    return found


CATALOGUES = {c.name: c for c in _catalogues()}


def as_numpy_scalars(value):
    """``value`` with every Python bool, int and float in it (inside tuples, lists, dict values) a NumPy scalar."""
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, int) and -2**63 <= value < 2**63:
        return np.int64(value)
    if isinstance(value, float):
        return np.float64(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):  # a named tuple keeps its fields
        return tuple(as_numpy_scalars(v) for v in value)
    if isinstance(value, list):
        return [as_numpy_scalars(v) for v in value]
    if isinstance(value, dict):
        return {k: as_numpy_scalars(v) for k, v in value.items()}
    return value


def as_zero_d_array(value):
    """A returned bool, int or float as a 0-d array (``np.sum(x)`` on a view, ``x[()]`` and the like)."""
    return np.asarray(value) if isinstance(value, (bool, int, float)) else value


def wrapped(reference, convert):
    @functools.wraps(reference)
    def learner(*args, **kwargs):
        return convert(reference(*args, **kwargs))
    return learner


@pytest.mark.parametrize("convert", [as_numpy_scalars, as_zero_d_array], ids=["numpy_scalars", "zero_d_arrays"])
@pytest.mark.parametrize("name", sorted(CATALOGUES))
def test_reference_with_numpy_types_passes(name, convert):
    """Does the reference still pass when its numbers come back as NumPy scalars or 0-d arrays?"""
    catalogue = CATALOGUES[name]
    fn = wrapped(catalogue.reference, convert)
    for seed in SEEDS:
        v = verdict(catalogue.check, fn, seed)
        assert v.status == PASS, f"{name}, seed {seed}: {v.line}"


@pytest.mark.parametrize("name", ["tensor_bytes", "lora_param_count"])
def test_the_reported_examples_pass(name):
    """The issue's two: ``np.int64(33554432)`` for 33554432 bytes, and a LoRA count as ``np.int64``."""
    catalogue = CATALOGUES[name]
    v = verdict(catalogue.check, lambda *a: np.int64(catalogue.reference(*a)), 0)
    assert v.status == PASS, v.line


@pytest.mark.parametrize(("got", "expected", "same"), [
    (np.int64(33554432), 33554432, True),
    (np.uint32(7), 7, True),
    (np.array(7), 7, True),
    (np.float32(0.5), 0.5, True),
    (np.array(0.25), 0.25, True),
    (np.bool_(True), True, True),
    (np.array(False), False, True),
    ((np.int64(3), np.float64(2.5)), (3, 2.5), True),
    ([np.int64(1), np.int64(2)], [1, 2], True),
    ({"a": np.int64(1)}, {"a": 1}, True),
    (True, 1, False),
    (np.bool_(True), 1, False),
    (1, True, False),
    (np.int64(1), True, False),
    (True, 1.0, False),
    (np.bool_(True), 1.0, False),
    ("33554432", 33554432, False),
    ("0.5", 0.5, False),
    (np.str_("7"), 7, False),
    (b"7", 7, False),
    (["0.5", "0.25"], [0.5, 0.25], False),
    (np.array([True, False]), [1.0, 0.0], False),
    (np.array([1, 0]), [1.0, 0.0], True),
    (np.array([True, False]), np.array([True, False]), True),
    (np.array([1, 0]), np.array([True, False]), True),  # as before: an array of bools is compared as numbers
    (None, 0, False),
    (np.array([7]), 7, False),
    (np.int64(8), 7, False),
    ((1, True), (1, 1), False),
    ([1, 2], (1, 2), False),
])
def test_close_enough_compares_values_not_types(got, expected, same):
    """Are NumPy numbers equal to Python ones of the same value, while bools, strings and shapes still differ?"""
    assert close_enough(got, expected) is same
