"""Fixtures shared by the grader's tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def worker_serving():
    """A worker's serve loop on one end of a socket pair (in a thread of this process), the grader's stand-in on
    the other: the protocol of a kernel exercise, run on any machine (on a CPU the "device" arrays are NumPy's)."""
    import socket
    import threading
    import time

    from mlsys_lab.course import checks, worker

    def serve(fn):
        grader_end, worker_end = socket.socketpair()
        thread = threading.Thread(target=worker._answer, args=(worker_end, fn, set()), daemon=True)
        thread.start()
        return checks.LearnerFunction(grader_end, time.monotonic() + 60), thread

    return serve
