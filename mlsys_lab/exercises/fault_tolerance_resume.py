"""Check of lesson 09's resume exercise: a training job killed with SIGKILL at random points and restarted.

The learner's ``train(folder, batches)`` runs in a forked child (:func:`run_writer_killed`; in a graded run
the learner's worker forks, ``fn.run_writer``). ``batches`` is the data loader; the child is killed while it
waits for batch ``k``, so it has trained exactly ``k`` steps since step 0. This process reads the folder it
leaves: which checkpoints are complete and valid, whether each equals the uninterrupted run's state at its
step, and which checkpoints each attempt committed (the manifests it renamed into place, from the child's
record of its ``os.replace`` calls). Between attempts it sometimes tears the newest checkpoint the way a
kill inside :func:`save_checkpoint` or a lost write would leave it, so a resume must check what it loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

from mlsys_lab.exercises import Case, check, rng
from mlsys_lab.fault_tolerance.checkpoint_io import make_data
from mlsys_lab.fault_tolerance.kill_resume import run_writer_killed
from mlsys_lab.fault_tolerance.resume import (
    CHECKPOINT_EVERY,
    CONFIG,
    data_name,
    digest,
    fresh_state,
    from_bytes,
    manifest_name,
    random_batches,
    save_checkpoint,
    train_step,
    uninterrupted,
)

TEARS = {
    "data": "SIGKILL inside the data write (data cut short, no manifest)",
    "manifest": "SIGKILL between the data and the manifest (data complete, no manifest)",
    "short": "a write lost in a power cut (manifest present, data cut short)",
    "flip": "silent corruption (manifest present, one byte of data flipped)",
    "json": "a torn manifest (its JSON cut short)",
    "gone": "the data file deleted (manifest present)",
}


def reference_train(folder, batches) -> None:
    """Resume from the newest complete, valid checkpoint (or step 0), skip the batches it holds, train on."""
    folder = Path(folder)
    x, y = make_data(CONFIG)
    state = None
    manifests = sorted(folder.glob("ckpt_*.json"), key=lambda p: int(p.stem.split("_")[1]), reverse=True)
    for manifest in manifests:
        try:
            meta = json.loads(manifest.read_text())
            data = (folder / meta["file"]).read_bytes()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(data) == meta["n_bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"]:
            state = from_bytes(data)
            break
    state = state or fresh_state(CONFIG)
    saved = state["step"]
    for number, batch in enumerate(batches, start=1):
        if number <= state["step"]:
            continue  # already in the checkpoint
        train_step(state, x, y, batch, CONFIG)
        if state["step"] % CHECKPOINT_EVERY == 0:
            save_checkpoint(folder, state)
            saved = state["step"]
    if state["step"] > saved:
        save_checkpoint(folder, state)


def valid_steps(folder: Path) -> dict[int, str]:
    """{step: digest} of every complete checkpoint whose data matches its manifest."""
    out = {}
    for manifest in folder.glob("ckpt_*.json"):
        try:
            meta = json.loads(manifest.read_text())
            data = (folder / meta["file"]).read_bytes()
            if len(data) == meta["n_bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"]:
                out[int(meta["step"])] = digest(from_bytes(data))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def tear(folder: Path, step: int, how: str) -> None:
    """Leave the checkpoint of ``step`` as a kill or a lost write would (see :data:`TEARS`)."""
    data, manifest = folder / data_name(step), folder / manifest_name(step)
    content = data.read_bytes()
    if how in ("data", "manifest"):
        manifest.unlink()
    if how in ("data", "short"):
        data.write_bytes(content[:len(content) // 2])
    if how == "flip":
        middle = len(content) // 2
        data.write_bytes(content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1:])
    if how == "json":
        text = manifest.read_bytes()
        manifest.write_bytes(text[:len(text) // 2])
    if how == "gone":
        data.unlink()


def _moment(pause: int, total: int) -> str:
    return f"after the last batch ({total})" if pause >= total else f"waiting for batch {pause + 1}"


def _attempt(fn: Callable, folder: Path, batches: list, pause_after: int | None) -> list[str]:
    if hasattr(fn, "run_writer"):
        return fn.run_writer(folder, batches, pause_after)
    return run_writer_killed(fn, folder, batches, pause_after)


def _committed(lines: list[str]) -> list[int]:
    """Steps whose manifest the attempt renamed into place, in order."""
    found = (re.search(r"\|.*/ckpt_(\d+)\.json$", line) for line in lines if line.startswith("rename "))
    return [int(m.group(1)) for m in found if m]


def _expected_commits(start: int, stop: int, total: int, finished: bool) -> list[int]:
    steps = [s for s in range(start + 1, stop + 1) if s % CHECKPOINT_EVERY == 0]
    if finished and total > start and total % CHECKPOINT_EVERY:
        steps.append(total)
    return steps


def resume_case(fn: Callable, total: int, kills: list[int], tears: dict[int, list[str]], seed: int) -> str:
    """Run, kill after each ``kills[i]`` batches (tearing the newest checkpoints as ``tears[i]`` says), let
    the last attempt finish; 'ok' or what went wrong."""
    batches = random_batches(total, seed)
    reference = uninterrupted(batches)
    with tempfile.TemporaryDirectory(dir=getattr(fn, "scratch_dir", None)) as name:
        folder = Path(name)
        start, story = 0, []
        for attempt, pause in enumerate([*kills, None]):
            lines = _attempt(fn, folder, batches, pause)
            if "todo" in lines:
                raise NotImplementedError
            problem = next((line for line in lines if line.startswith(("raised", "timed out"))), None)
            where = f"{', '.join(story)}; then " if story else ""
            when = "ran to the end" if pause is None else f"SIGKILLed {_moment(pause, total)}"
            if problem:
                return f"{where}attempt {attempt + 1} ({when}) {problem}"
            if pause is None and "done" not in lines:
                return f"{where}attempt {attempt + 1} did not finish"
            stop = total if pause is None else min(pause, total)
            got, due = _committed(lines), _expected_commits(start, stop, total, pause is None)
            if got != due:
                return (f"{where}attempt {attempt + 1} resumed after the checkpoint of step {start} and {when}: "
                        f"it committed checkpoints {got}, expected {due}"
                        + (" (a step trained twice: resume from the newest valid checkpoint)"
                           if any(s <= start for s in got) else "")
                        + (" (work lost: train each batch as it arrives, and save every "
                           f"{CHECKPOINT_EVERY} steps)" if set(due) - set(got) and pause is not None else ""))
            valid = valid_steps(folder)
            wrong = sorted(s for s, d in valid.items() if reference.get(s) != d)
            if wrong:
                return (f"{where}attempt {attempt + 1}: the checkpoint of step {wrong[0]} differs from the run never "
                        "killed (wrong batch skipped, or state not fully restored)")
            story.append(f"attempt {attempt + 1} {'finished' if pause is None else 'killed ' + _moment(pause, total)}")
            for how in tears.get(attempt, []):
                newest = max(valid, default=0)
                if newest:
                    tear(folder, newest, how)
                    del valid[newest]
                    story.append(f"checkpoint {newest} torn: {how}")
            start = max(valid, default=0)
        if max(valid, default=0) != total:
            return f"{', '.join(story)}: no valid checkpoint of the last step {total}"
        return "ok"


def check_resume_training(fn: Callable) -> None:
    """``fn(folder, batches)`` resumes from the newest complete valid checkpoint and trains on; killed with
    SIGKILL at random points and restarted, it must end bitwise equal to the run never killed."""
    if not hasattr(os, "fork"):
        print("… resume_training: this check needs os.fork (Linux, macOS or WSL)")
        return
    g = rng()
    modes = list(TEARS)
    g.shuffle(modes)

    def case(total: int, kills: list[int], tears: dict[int, list[str]]) -> Case:
        torn = "; ".join(f"after kill {k + 1}: " + " + ".join(v) for k, v in tears.items())
        label = (f"{total} steps, SIGKILL while waiting for batches {[k + 1 for k in kills]}".replace(
            f"{total + 1}]", f"{total + 1} (after the last)]") + (f", tears {torn}" if torn else ""))
        return Case(label, (fn, total, kills, tears, int(g.integers(0, 2**31))), expected="ok",
                    check_result=lambda got: None if got == "ok" else str(got))

    def kills_in(total: int, n: int, low: int = 1) -> list[int]:
        return sorted(int(k) for k in g.choice(range(low, total), size=n, replace=False))

    short = int(g.choice([11, 12, 13, 14, 16, 17]))  # not a multiple of 5: the last step needs its own save
    total = int(g.integers(21, 29))
    cases = [  # killed before the first checkpoint, twice; then after the last batch, before the final save
        case(short, [0, int(g.integers(1, 5)), short], {}),
        case(total, kills_in(total, 3, low=11), {0: [modes[0]], 1: [modes[1]], 2: [modes[2]]}),
        case(int(g.integers(25, 33)), [20, int(g.integers(21, 25))], {0: [modes[3], modes[4]], 1: [modes[5]]}),
    ]
    check("resume_training", resume_case, cases, compare=lambda got, expected: True)  # judged in check_result
