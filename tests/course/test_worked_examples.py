"""Is every worked example in every exercise prompt what the reference computes? (Issue 31, erratum 1.)

Each exercise's prompt states one worked example (STYLE.md, "Exercises"). ``worked_examples.EXAMPLES`` lists, per
exercise, what the prompt states (``shown``: words of the prompt, whitespace aside) and the Python expression that
recomputes it (``computed``), evaluated in a namespace like the notebook's (the cells the exercise needs and the
solved exercise cell, :func:`prompts.exercise_namespace`) in which the exercise's name is bound to the check's
``reference_<exercise>`` where there is one: the numbers a learner reads are the numbers the check expects. The
test parses the numbers (and True, False, None) of ``shown`` and compares them, in order, with those of the
computed value, each to the precision it is printed with; the words of the value must appear in ``shown``. A
statement with nothing to compare (``Claim``) is an expression that must be True. Examples written as a doctest
(``>>>``) are run as one. Every exercise of every lesson must have an entry.
"""

from __future__ import annotations

import doctest
import inspect
import math
import re

import numpy as np
import pytest
from prompts import Prompt, all_prompts, exercise_namespace
from worked_examples import EXAMPLES, SETUP, Claim

from mlsys_lab.course.checks import lessons
from mlsys_lab.course.release_record import LEARNER_ALIASES

PROMPTS = {p.exercise.name: p for p in all_prompts()}
NUMBER = re.compile(r"(?<![\w.])(-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?(?:[eE]([-+]?\d+))?)(?!\w)"
                    r"|\b(True|False|None)\b")


def normalized(text: str) -> str:
    return " ".join(text.replace("−", "-").replace("\u2009", " ").replace("\u202f", " ").split())


SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
POWER_OF_TEN = re.compile(r"(\d(?:\.\d+)?) ?[×·] ?10([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+)")


def stated(shown: str) -> list[tuple[object, float]]:
    """The numbers, True, False and None of ``shown`` in order, each with half a unit of its last printed digit
    (``5 × 10⁻³`` is read as 5e-3)."""
    found = []
    text = POWER_OF_TEN.sub(lambda m: f"{m.group(1)}e{m.group(2).translate(SUPERSCRIPT)}", normalized(shown))
    for m in NUMBER.finditer(text):
        if m.group(4):
            found.append(({"True": True, "False": False, "None": None}[m.group(4)], 0.0))
            continue
        text, decimals, exponent = m.group(1), m.group(2) or "", m.group(3)
        half_unit = 0.5 * 10.0 ** (-len(decimals)) * 10.0 ** int(exponent or 0)
        found.append((float(text.replace(",", "")), half_unit))
    return found


def flattened(value) -> tuple[list, list[str]]:
    """The numbers, booleans and Nones of ``value`` in order (dict keys before their values), and its strings."""
    values: list = []
    words: list[str] = []

    def walk(v):
        if isinstance(v, dict):
            for key, item in v.items():
                walk(key)
                walk(item)
        elif isinstance(v, str):
            words.append(v)
        elif isinstance(v, (bool, np.bool_)) or v is None:
            values.append(None if v is None else bool(v))
        elif isinstance(v, (int, float, np.integer, np.floating)):
            values.append(float(v))
        elif isinstance(v, np.ndarray):
            for item in v.tolist() if v.ndim else [v.item()]:
                walk(item)
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        else:
            raise TypeError(f"cannot compare a {type(v).__name__} with a prompt's text")

    walk(value)
    return values, words


def disagreements(shown: str, value) -> list[str]:
    expected, words = flattened(value)
    printed = stated(shown)
    problems = [f"the value's word {w!r} is not in the prompt's words" for w in words if w not in shown]
    if len(printed) != len(expected):
        return [*problems, f"the prompt states {len(printed)} values ({[p for p, _ in printed]}), "
                           f"the reference gives {len(expected)} ({expected})"]
    for (number, half_unit), truth in zip(printed, expected, strict=True):
        if isinstance(number, bool) or number is None or isinstance(truth, bool) or truth is None:
            if number is not truth:
                problems.append(f"the prompt says {number}, the reference gives {truth}")
        elif not math.isclose(number, truth, rel_tol=1e-12, abs_tol=half_unit * (1 + 1e-9)):
            problems.append(f"the prompt says {number:g}, the reference gives {truth!r}")
    return problems


def references(prompt: Prompt) -> dict:
    """The check module's names, with the exercise's function bound to its reference where the check has one
    that takes the same arguments (the lesson's solution stays otherwise: nbval proves it passes the check)."""
    module = lessons()[prompt.lesson.split("_", 1)[1]]
    names = {k: v for k, v in vars(module).items() if not k.startswith("__")}
    reference = names.get(LEARNER_ALIASES.get(prompt.exercise.name, f"reference_{prompt.exercise.name}"))
    return names, reference


def namespace(prompt: Prompt) -> dict:
    ns = exercise_namespace(prompt)
    names, reference = references(prompt)
    ns.update({k: v for k, v in names.items() if k not in ns})
    function = ns[prompt.exercise.function_name]
    if reference is not None:
        mine, theirs = inspect.signature(function).parameters, inspect.signature(reference).parameters
        extra = list(theirs)[len(mine):]
        if list(theirs)[:len(mine)] == list(mine) and all(theirs[p].default is not inspect.Parameter.empty
                                                          for p in extra):
            ns[prompt.exercise.function_name] = reference
    exec(SETUP.get(prompt.lesson, ""), ns)
    return ns


def test_every_exercise_has_its_worked_example():
    """Does every exercise of every lesson have an entry (or a doctest), and every entry an exercise?"""
    doctested = {name for name, p in PROMPTS.items() if ">>>" in p.without_hints()}
    missing = sorted(set(PROMPTS) - set(EXAMPLES) - doctested)
    stale = sorted(set(EXAMPLES) - set(PROMPTS))
    assert not missing, f"exercises without a recomputed worked example: {missing}"
    assert not stale, f"entries for no exercise: {stale}"


@pytest.mark.parametrize("name", sorted(PROMPTS), ids=lambda n: f"{PROMPTS[n].lesson[:2]}-{n}")
def test_worked_example_is_what_the_reference_computes(name):
    prompt = PROMPTS[name]
    text = normalized(prompt.without_hints())
    ns = namespace(prompt)
    problems = []
    for example in EXAMPLES.get(name, []):
        shown = normalized(example.shown)
        if shown not in text:
            problems.append(f"not in the prompt: {example.shown!r}")
            continue
        if isinstance(example, Claim):
            if eval(example.holds, ns) is not True:  # noqa: S307 - the table's own expressions
                problems.append(f"{example.shown!r}: does not hold ({example.holds})")
            continue
        value = eval(example.computed, ns)  # noqa: S307 - the table's own expressions
        problems += [f"{example.shown!r}: {p}" for p in disagreements(shown, value)]
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(
        optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS, verbose=False)
    if ">>>" in prompt.without_hints():
        unfenced = re.sub(r"^```.*$", "", prompt.without_hints(), flags=re.MULTILINE)  # a fence ends the output
        test = parser.get_doctest(unfenced, ns, name, None, 0)
        result = runner.run(test, out=problems.append)
        assert result.attempted > 0
    assert not problems, f"{prompt.lesson}, {name}:\n" + "\n".join(problems)


@pytest.mark.parametrize("shown, value, ok", [
    ("is **2,113,536** bytes", 2_113_536, True),
    ("≈ 0.083 FLOP/byte", 1 / 12, True),
    ("≈ 0.084 FLOP/byte", 1 / 12, False),
    ("`(4.79e13, \"L2\")`", (4.79e13, "L2"), True),
    ("`(4.79e13, \"L2\")`", (4.79e13, "HBM"), False),
    ("[[0.2683, −0.3578, −0.1789, 0.2683]]", [[0.2683303, -0.35776837, -0.08944343, 0.1788815]], False),
    ("`{\"hang_step\": 1, \"stragglers\": []}`", {"hang_step": 1, "stragglers": []}, True),
    ("is `(False, [])`", (False, []), True),
    ("is `(False, [])`", (True, []), False),
    ("gives `None`", None, True),
    ("w ≈ −5 × 10⁻³ (five steps)", -5.0e-3, True),
])
def test_the_comparison_catches_a_wrong_figure(shown, value, ok):
    """Would the test have caught lesson 06's printed gradient, a wrong word, a wrong truth value?"""
    assert (not disagreements(normalized(shown), value)) == ok
