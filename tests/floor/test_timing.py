"""Does benchmark() warm up, count runs, and report the median of the samples?"""

import pytest

from mlsys_lab import backend
from mlsys_lab.timing import Timing, benchmark
from mlsys_lab.units import format_seconds


def test_benchmark_runs_warmup_plus_repeat_times():
    calls = []
    timing = benchmark(lambda: calls.append(1), warmup=3, repeat=7)
    assert len(calls) == 10
    assert len(timing.samples) == 7 and timing.device == ("gpu" if backend.on_gpu else "cpu")
    assert timing.min <= timing.median <= timing.max


def test_timing_statistics_are_the_samples():
    t = Timing((3.0, 1.0, 2.0, 10.0, 4.0), "cpu")
    assert (t.median, t.min, t.max) == (3.0, 1.0, 10.0)


@pytest.mark.parametrize("seconds, text", [(1.2, "1.2 s"), (4.56e-3, "4.56 ms"), (12.3e-6, "12.3 µs"), (5e-9, "5 ns")])
def test_format_seconds(seconds, text):
    assert format_seconds(seconds) == text


def test_benchmark_validates_counts():
    with pytest.raises(ValueError, match="repeat must be an integer >= 1; got 0"):
        benchmark(lambda: None, repeat=0)


def test_gpu_timing_refused_without_gpu():
    if backend.on_gpu:
        pytest.skip("needs the NumPy backend")
    with pytest.raises(ValueError, match="use_gpu=True needs the CuPy backend"):
        benchmark(lambda: None, use_gpu=True)


def test_flush_bytes_is_validated():
    with pytest.raises(ValueError, match="flush_bytes must be an integer >= 0"):
        benchmark(lambda: None, flush_bytes=-1)


@pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")
def test_flush_hides_host_work_before_the_launch():
    """Events bracket the host's work too: 3 ms of host sleep before a tiny kernel is timed as about 3 ms
    (bounded below with a wide margin: the start event can fire a little after it is queued), unless a
    long enough fill (32 GiB: several ms at any HBM bandwidth) keeps the GPU busy meanwhile."""
    import time

    x = backend.xp.zeros(256, dtype=backend.xp.float32)

    def slow_host_tiny_kernel():
        time.sleep(3e-3)
        x.fill(1.0)

    exposed = benchmark(slow_host_tiny_kernel, warmup=1, repeat=5)
    assert exposed.min >= 1.5e-3
    hidden = benchmark(slow_host_tiny_kernel, warmup=1, repeat=5, flush_bytes=32 << 30)
    assert hidden.median < 0.5e-3
