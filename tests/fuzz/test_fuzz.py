"""Does every public function reject bad input clearly? The property-based fuzz suite of issue #19.

Each public function and dataclass gets a valid baseline call (``fuzz/baselines.py``); each parameter in turn
is replaced by bad and edge values (fixed ones and Hypothesis-generated ones), and every call is judged clear,
correct, unclear, silent or hang (``fuzz/harness.py``). The test prints the counts and fails on any unclear,
silent or hanging (function, parameter) that ``fuzz/allowlist.py`` does not list with its reason, and prints
every allow-list entry that now passes. Every target has a baseline or is left out by an exclusion of
``fuzz/harness.py`` (needs a GPU, runs processes, writes files, ...); the counts of both are printed by category,
and a target with neither fails the test, so nothing is skipped silently.
``MLSYS_FUZZ_MODULES=mlsys_lab.moe,mlsys_lab.roofline.model`` fuzzes only
those modules (while iterating on them; stale entries are then judged for them alone).
"""

from __future__ import annotations

import math
import time
from collections import Counter

import numpy as np
from fuzz import harness
from fuzz.allowlist import ALLOWED
from fuzz.baselines import Builder

from mlsys_lab.validation import check_int

BAD = ("unclear", "silent", "hang")


def test_classifier_tells_the_five_outcomes_apart():
    """Is each outcome recognised on a toy function (so the suite can fail)?"""
    def size(n: int, scale: float = 1.0) -> float:
        check_int("n", n, low=1)
        if scale > 1e6:
            while True:
                pass
        return math.sqrt(scale) * n

    with harness.limits():
        def judge(param, value):
            status, outcome = harness.timed_call(size, {"n": 2, param: value})
            return harness.classify(status, outcome, param, value, {"n": int, "scale": float}[param], 2.0)[0]

        assert judge("n", 0) == "clear"
        assert judge("n", 3) == "correct"
        assert judge("n", 2.5) == "clear"
        assert judge("scale", "ab") == "unclear"  # TypeError from math.sqrt names no parameter
        assert judge("scale", -1.0) == "unclear"  # ValueError: math domain error
        assert judge("scale", math.inf) == "hang"
        assert judge("scale", math.nan) == "silent"


def test_classifier_judges_typed_values_and_broken_config_fields():
    """Is a str for a sequence of names, a mapping for a number or a negative dependence taken 'silent', and an
    error naming a config's field 'clear'?"""
    from typing import Sequence

    from fuzz.values import NEGATIVE_VECTORS, typed_bad

    assert harness.classify("ok", 3, "names", "qv", Sequence[str], 2)[0] == "silent"
    assert harness.classify("ok", 3, "n", {"a": 1}, int, 2)[0] == "silent"
    assert harness.classify("ok", True, "vectors", [(-1, 1)], None, True, NEGATIVE_VECTORS)[0] == "silent"
    error = ValueError("d_model must be an integer between 1 and 4096; got 1099511627776")
    assert harness.classify("raised", error, "cfg.d_model", 2**40, int, 2)[0] == "clear"
    assert harness.classify("raised", ValueError("cfg must be a BlockConfig"), "cfg.d_model", 2**40, int, 2)[0] \
        == "unclear"
    labels = [label for label, _ in typed_bad("vectors", [(1, -1)], None)]
    assert NEGATIVE_VECTORS in labels and "extra leading dimension (2, 2, 3)" in \
        [label for label, _ in typed_bad("x", np.ones((2, 3)), None)]


def test_every_public_function_rejects_bad_input_clearly():
    """Is every bad call of the library a clear error or a sensible result, within the allow-list?"""
    start = time.perf_counter()
    out = harness.run(Builder())
    calls = out["calls"]
    counts = Counter(record[3] for record in calls)
    left_out = Counter(out["excluded"].values())
    print(f"\nfuzz: {out['found'] + len(out['excluded'])} public functions and dataclasses: {len(out['covered'])} "
          f"covered, {len(out['uncovered'])} without a baseline, {len(out['excluded'])} excluded ("
          + ", ".join(f"{category}: {n}" for category, n in left_out.most_common()) + f"); {len(calls)} calls in "
          f"{time.perf_counter() - start:.0f} s: "
          + ", ".join(f"{counts[c]} {c}" for c in ("clear", "correct", "unclear", "silent", "hang", "skipped")))
    for category, n in left_out.most_common():
        reasons = Counter(harness.EXCLUDED_FUNCTIONS.get(name) or next(
            why for module, why in harness.EXCLUDED_MODULES.items() if name == module or name.startswith(module + "."))
            for name, c in out["excluded"].items() if c == category)
        print(f"fuzz: excluded, {category}: {n}\n" + "\n".join(f"  {k:3d} {why}" for why, k in reasons.most_common()))
    failing: dict[str, tuple] = {}
    undecided, crashed = set(), set()  # pairs with calls skipped (budget spent), targets whose process crashed
    for target, parameter, label, cls, detail in calls:
        if cls in BAD:
            failing.setdefault(f"{target}:{parameter}", (label, cls, detail))
        if cls == "skipped":
            undecided.add(f"{target}:{parameter}")
        if parameter == "*":
            crashed.add(target)
    print(f"fuzz: {len(failing)} failing (function, parameter) pairs, {len(ALLOWED)} allowed")
    # an entry is stale when its pair ran every call and none failed (a skipped call proves nothing), or when
    # its function is gone; entries of functions left out (MLSYS_FUZZ_MODULES) or without a baseline are not judged
    judged = set(out["covered"]) - crashed
    stale = sorted(key for key in set(ALLOWED) - set(failing) - undecided if not key.endswith(":*") and (
        key.split(":")[0] in judged or (key.split(":")[0] not in out["names"] and not harness.restricted())))
    if stale:
        print(f"fuzz: {len(stale)} allow-list entries now pass; remove them:\n  " + "\n  ".join(stale))
    assert not out["uncovered"], ("targets without a baseline (give each an entry in fuzz/baselines.py, or an "
                                  "exclusion with its reason in fuzz/harness.py):\n  " + "\n  ".join(out["uncovered"]))
    new = {key: why for key, why in failing.items() if key not in ALLOWED and key.split(":")[0] + ":*" not in ALLOWED}
    assert not new, "bad input not rejected clearly:\n" + "\n".join(
        f"  {key} = {label}: {cls} ({detail})" for key, (label, cls, detail) in sorted(new.items()))
