"""Does shared.cu compile, and do the transposes and strided bank reads return what NumPy does?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels.memory_hierarchy import shared_memory

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")



def test_shared_stride_reference():
    """Thread t reads word (t % 32) * stride, iters times: stride 3, 10 reads -> lane 1 sums 30, lane 31 930."""
    ref = shared_memory.shared_stride_reference(stride=3, iters=10, n_threads=64)
    assert ref[0] == 0 and ref[1] == 30 and ref[33] == 30 and ref[31] == 930


@needs_gpu
def test_shared_kernels_match_numpy():
    xp = backend.xp
    x = xp.asarray(np.random.default_rng().standard_normal((300, 517), dtype=np.float32))
    for variant in shared_memory.TRANSPOSE_KERNELS:
        assert bool((shared_memory.transpose_on_gpu(x, variant) == x.T).all())
    for stride in (1, 2, 7, 32):
        got = backend.asnumpy(shared_memory.shared_stride(stride, 64, blocks=4, threads=128))
        np.testing.assert_array_equal(got, shared_memory.shared_stride_reference(stride, 64, 512))
