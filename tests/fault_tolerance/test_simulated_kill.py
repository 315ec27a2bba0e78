"""Does the simulated SIGKILL record what a real one leaves, and ignore whatever the learner's code does after it?"""

import os

import pytest

from mlsys_lab.exercises import fault_tolerance as ex
from mlsys_lab.exercises.fault_tolerance_kill import (
    FolderEvents,
    KillingStream,
    SimulatedKill,
    files_of,
    make_folder,
    name_changes,
    open_folder,
    restore_folder,
    run_until_killed,
    snapshot,
)
from mlsys_lab.exercises.fault_tolerance_resume import reference_train, resume_case
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic, write_in_place


def test_stream_hands_items_then_kills_and_stays_dead():
    seen = []
    stream = KillingStream([b"a", b"b", b"c"], 2, lambda: seen.append("snapshot") or "record")
    assert iter(stream) is stream and next(stream) == b"a" and next(stream) == b"b"
    with pytest.raises(SimulatedKill, match="waiting for item 3"):
        next(stream)
    with pytest.raises(SimulatedKill):
        next(stream)
    assert stream.killed and stream.observed == "record" and seen == ["snapshot"] and not stream.finished
    assert not issubclass(SimulatedKill, Exception)  # an `except Exception` in the learner's loop lets it through
    assert KillingStream.LEARNER_OPERATIONS == frozenset({"__iter__", "__next__"})
    whole = KillingStream([1, 2], None, lambda: None)
    assert list(whole) == [1, 2] and whole.finished and not whole.killed


def test_snapshot_records_links_without_following_them(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"abc")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.bin").write_bytes(b"")
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_bytes(b"not for the learner")
    os.symlink(secret, tmp_path / "link.json")
    os.symlink(tmp_path.parent, tmp_path / "linked_folder")
    files = snapshot(tmp_path)
    assert files["a.bin"].content == b"abc" and files["a.bin"].inode == (tmp_path / "a.bin").stat().st_ino
    assert files["sub"].kind == "dir" and files["sub/b.bin"].content == b""
    assert files["link.json"].kind == "other" and files["link.json"].content is None
    assert files["linked_folder"].kind == "other" and not any(n.startswith("linked_folder/") for n in files)
    assert files_of(files) == {"a.bin": b"abc", "sub/b.bin": b""}
    top = open_folder(tmp_path)
    again = make_folder(top, "again")
    restore_folder(files, again)
    os.close(again)
    os.close(top)
    assert sorted(str(p.relative_to(tmp_path / "again")) for p in (tmp_path / "again").rglob("*")) == [
        "a.bin", "sub", "sub/b.bin"]  # the link is not recreated, and what it named is never copied


def test_folder_events_see_a_rename_and_a_write_in_place(tmp_path):
    path = tmp_path / "ckpt.bin"
    path.write_bytes(b"old")
    with FolderEvents(tmp_path) as events:
        if not events.available:
            pytest.skip("no inotify here")
        write_atomic(path, [b"new"])
        assert name_changes(events.read(), "ckpt.bin") is None
        write_in_place(path, [b"newer"])
        assert "written to in place" in name_changes(events.read(), "ckpt.bin")
        os.remove(path)
        assert "deleted" in name_changes(events.read(), "ckpt.bin")


def test_what_the_writer_does_after_the_kill_does_not_count():
    """A writer that catches the kill (any BaseException) and then writes over the checkpoint: the record was
    taken first, and a real SIGKILL would have run none of it."""
    def stubborn(path, chunks):
        data = []
        try:
            for chunk in chunks:
                data.append(chunk)
        except BaseException:
            pass
        path.write_bytes(b"".join(data))  # in place, after the kill

    old, new = b"o" * 3000, b"n" * 9000
    assert ex._writer_case(stubborn, old, new, 1000, 4) == "ok"  # killed: the file was intact at the kill
    assert "written to in place" in ex._writer_case(stubborn, old, new, 1000, None) or \
        "same inode" in ex._writer_case(stubborn, old, new, 1000, None)


def test_the_kill_arriving_as_a_grader_error_is_handled_as_the_kill():
    """In a graded run the kill reaches the learner's code as the worker's error for a failed grader-side call
    (a RuntimeError), which their code may replace with its own: the check still judges the record."""
    def as_worker(fn):
        class Remote:  # what the worker's proxy of the stream does: the grader's error becomes a RuntimeError
            def __init__(self, stream):
                self.stream = stream

            def __iter__(self):
                return self

            def __next__(self):
                try:
                    return next(self.stream)
                except SimulatedKill as exc:
                    raise RuntimeError(f"SimulatedKill: {exc}") from None

        def call(path_or_folder, stream):
            try:
                return fn(path_or_folder, Remote(stream))
            except RuntimeError as exc:
                raise ValueError("the learner's code replaced the error") from exc
        return call

    old, new = b"o" * 3000, b"n" * 9000
    assert ex._writer_case(as_worker(write_atomic), old, new, 1000, 4) == "ok"
    assert ex._writer_case(as_worker(write_in_place), old, new, 1000, None) != "ok"
    assert resume_case(as_worker(reference_train), 13, [2, 7], {0: ["json"]}, seed=3) == "ok"


def test_an_error_before_the_kill_point_is_the_learners():
    def broken(path, chunks):
        next(chunks)
        raise KeyError("oops")

    stream = KillingStream([b"a", b"b"], 1, lambda: None)
    with pytest.raises(KeyError):
        run_until_killed(broken, ("p", stream), stream)
