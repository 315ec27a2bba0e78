"""Check of lesson 09's resume exercise: a training job killed with SIGKILL at random points and restarted.

The learner's ``train(folder, batches)`` gets its data loader from the check: a :class:`KillingStream` that, while
the job waits for batch ``k + 1``, records the folder as a SIGKILL at that moment would leave it and kills the job
(:mod:`.fault_tolerance_kill`); the job has then trained exactly ``k`` steps since step 0. The check judges the
record: which checkpoints are complete and valid, whether each equals the uninterrupted run's state at its step,
and which checkpoints the attempt committed (the manifests that are new or changed since the attempt started:
their inode numbers and contents, seen from the check's side). The next attempt runs in a fresh folder holding
the record, so nothing the job did after the kill point counts. Between attempts the check sometimes tears the
newest checkpoint the way a kill inside :func:`save_checkpoint` or a lost write would leave it, so a resume must
check what it loads.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
from pathlib import Path
from typing import Callable

from mlsys_lab.exercises import Case, check, raised, rng
from mlsys_lab.exercises.fault_tolerance_kill import (
    Entry,
    KillingStream,
    files_of,
    make_folder,
    open_folder,
    restore_folder,
    run_until_killed,
    snapshot,
)
from mlsys_lab.fault_tolerance.checkpoint_io import make_data
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


def valid_steps(files: dict[str, bytes]) -> dict[int, str]:
    """{step: digest} of every complete checkpoint among ``files`` ({name: content}) whose data matches its manifest."""
    out = {}
    for name, text in files.items():
        if not re.fullmatch(r"ckpt_\d+\.json", name):
            continue
        try:
            meta = json.loads(text)
            data = files[meta["file"]]
            if len(data) == meta["n_bytes"] and hashlib.sha256(data).hexdigest() == meta["sha256"]:
                out[int(meta["step"])] = digest(from_bytes(data))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError):
            continue
    return out


def tear(files: dict[str, Entry], step: int, how: str) -> None:
    """Leave the checkpoint of ``step`` among ``files`` (a snapshot) as a kill or a lost write would (:data:`TEARS`)."""
    data, manifest = data_name(step), manifest_name(step)
    content = files[data].content or b""
    if how in ("data", "manifest"):
        del files[manifest]
    if how in ("data", "short"):
        files[data] = Entry("file", 0, content[:len(content) // 2])
    if how == "flip":
        middle = len(content) // 2
        files[data] = Entry("file", 0, content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1:])
    if how == "json":
        text = files[manifest].content or b""
        files[manifest] = Entry("file", 0, text[:len(text) // 2])
    if how == "gone":
        del files[data]


def _moment(pause: int, total: int) -> str:
    return f"after the last batch ({total})" if pause >= total else f"waiting for batch {pause + 1}"


def _committed(before: dict[str, Entry], after: dict[str, Entry]) -> list[int]:
    """Steps whose manifest is new or changed (another inode, other bytes) in ``after``: the attempt's commits."""
    found = (re.fullmatch(r"ckpt_(\d+)\.json", name) for name, entry in after.items() if before.get(name) != entry)
    return sorted(int(m.group(1)) for m in found if m)


def _expected_commits(start: int, stop: int, total: int, finished: bool) -> list[int]:
    steps = [s for s in range(start + 1, stop + 1) if s % CHECKPOINT_EVERY == 0]
    if finished and total > start and total % CHECKPOINT_EVERY:
        steps.append(total)
    return steps


def resume_case(fn: Callable, total: int, kills: list[int], tears: dict[int, list[str]], seed: int) -> str:
    """Run, kill while the job waits for batch ``kills[i] + 1`` (then tear the newest checkpoints as ``tears[i]``
    says), restart from what the kill left, and let the last attempt finish; 'ok' or what went wrong."""
    batches = random_batches(total, seed)
    with tempfile.TemporaryDirectory(dir=getattr(fn, "scratch_dir", None)) as name:
        root = open_folder(name)
        try:
            return _attempts(fn, Path(name), root, total, batches, kills, tears)
        finally:
            os.close(root)


def _attempts(fn: Callable, root: Path, root_fd: int, total: int, batches: list, kills: list[int],
              tears: dict[int, list[str]]) -> str:
    """The attempts of :func:`resume_case`, each in a new folder of ``root`` (``root_fd``, the check's descriptor)."""
    reference = uninterrupted(batches)
    left: dict[str, Entry] = {}  # what the last attempt left, as the check recorded it
    story: list[str] = []
    for attempt, pause in enumerate([*kills, None]):
        for how in tears.get(attempt - 1, []):
            newest = max(valid_steps(files_of(left)), default=0)
            if newest:
                tear(left, newest, how)
                story.append(f"checkpoint {newest} torn: {how}")
        # a fresh folder, named only now (no earlier attempt could know it): nothing a job did after its kill counts
        name = f"attempt_{attempt + 1}_{secrets.token_hex(4)}"
        folder_fd = make_folder(root_fd, name)
        try:
            restore_folder(left, folder_fd)
            before = snapshot(folder_fd)
            where = f"{', '.join(story)}; then " if story else ""
            when = "ran to the end" if pause is None else f"SIGKILLed {_moment(pause, total)}"
            stream = KillingStream(batches, pause, lambda fd=folder_fd: snapshot(fd))
            try:
                run_until_killed(fn, (root / name, stream), stream)
            except NotImplementedError:
                raise
            except Exception as exc:  # before the kill point: the learner's own error, told with its attempt
                return f"{where}attempt {attempt + 1} ({when}) {raised(exc)}"
            left = stream.observed if stream.killed else snapshot(folder_fd)
        finally:
            os.close(folder_fd)
        start = max(valid_steps(files_of(before)), default=0)
        stop = total if pause is None else min(pause, total)
        got, due = _committed(before, left), _expected_commits(start, stop, total, pause is None)
        if got != due:
            return (f"{where}attempt {attempt + 1} resumed after the checkpoint of step {start} and {when}: "
                    f"it committed checkpoints {got}, expected {due}"
                    + (" (a step trained twice: resume from the newest valid checkpoint)"
                       if any(s <= start for s in got) else "")
                    + (" (work lost: train each batch as it arrives, and save every "
                       f"{CHECKPOINT_EVERY} steps)" if set(due) - set(got) and pause is not None else ""))
        valid = valid_steps(files_of(left))
        wrong = sorted(s for s, d in valid.items() if reference.get(s) != d)
        if wrong:
            return (f"{where}attempt {attempt + 1}: the checkpoint of step {wrong[0]} differs from the run never "
                    "killed (wrong batch skipped, or state not fully restored)")
        story.append(f"attempt {attempt + 1} {'finished' if pause is None else 'killed ' + _moment(pause, total)}")
    if max(valid, default=0) != total:
        return f"{', '.join(story)}: no valid checkpoint of the last step {total}"
    return "ok"


def check_resume_training(fn: Callable) -> None:
    """``fn(folder, batches)`` resumes from the newest complete valid checkpoint and trains on; killed with
    SIGKILL at random points and restarted, it must end bitwise equal to the run never killed."""
    if os.name != "posix":
        print("… resume_training: this check needs Linux, macOS or WSL (it reads folders as POSIX does)")
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
    # judged in check_result; the learner's fn, not the runner, is kept as their piece
    check("resume_training", resume_case, cases, compare=lambda got, expected: True, learner=fn)
