"""Does a packed launch put each argument where the kernel reads it, and launch what a RawKernel call would?"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels.launch import SLOT_BYTES, PackedLaunch, pack_arguments

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")

SOURCE = r"""
extern "C" __global__ void axpb(const float* x, float* y, int n, float a, long long b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + (float)b;
}
"""


def test_scalars_sit_in_the_low_bytes_of_their_slots():
    slots = pack_arguments(2, (np.int32(-3), np.float32(0.5), np.int64(2**40 + 1), np.float64(1.25)))
    raw = slots.view(np.uint8).reshape(-1, SLOT_BYTES)
    assert slots[:2].tolist() == [0, 0]  # the arrays' addresses go there at each call
    assert raw[2, :4].view(np.int32)[0] == -3 and not raw[2, 4:].any()
    assert raw[3, :4].view(np.float32)[0] == 0.5  # IEEE bits 0x3f000000, not the integer 0
    assert raw[4].view(np.int64)[0] == 2**40 + 1
    assert raw[5].view(np.float64)[0] == 1.25


@pytest.mark.parametrize("bad", [3, 2.0, np.arange(2), np.complex128(1j)])
def test_a_scalar_without_a_c_type_of_at_most_8_bytes_is_refused(bad):
    with pytest.raises(TypeError, match=r"scalars\[0\]"):
        pack_arguments(0, (bad,))


def test_the_number_of_arrays_must_be_a_count():
    with pytest.raises(ValueError, match="n_arrays"):
        pack_arguments(-1, ())


@needs_gpu
def test_packed_launch_matches_a_raw_kernel_call_from_several_threads():
    xp = backend.xp
    kernel = xp.RawKernel(SOURCE, "axpb")
    rng = np.random.default_rng()
    n = int(rng.integers(1000, 5000))
    x = xp.asarray(rng.standard_normal(n, dtype=np.float32))
    scalars = (np.int32(n), np.float32(rng.uniform(-2, 2)), np.int64(rng.integers(-50, 50)))
    blocks = (n + 255) // 256
    expected = xp.empty_like(x)
    kernel((blocks,), (256,), (x, expected, *scalars))
    plan = PackedLaunch(kernel, (blocks,), (256,), 0, 2, scalars)
    outs = [xp.zeros_like(x) for _ in range(8)]

    def run(out):
        for _ in range(20):
            plan(x, out)
        xp.cuda.get_current_stream().synchronize()

    threads = [threading.Thread(target=run, args=(out,)) for out in outs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for out in outs:
        xp.testing.assert_array_equal(out, expected)
    with pytest.raises(TypeError, match="2 device arrays"):
        plan(x)
