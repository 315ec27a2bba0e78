"""Does global.cu compile, and do the copy and strided reads return what NumPy does?"""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import global_memory

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")



def test_loader_rejects_unknown_files_and_formats_defines():
    with pytest.raises(ValueError, match="file_name must be one of the kernel sources"):
        loader.source_path("nope.cu")
    assert loader.define_options({"TN": 4, "BM": 128}) == ("-DBM=128", "-DTN=4")
    assert loader.blocks_for(1000, 256) == 4 and loader.blocks_for(1024, 256) == 4


@pytest.mark.skipif(backend.on_gpu, reason="checks the CPU message")
def test_launcher_without_gpu_says_why():
    with pytest.raises(loader.GPUUnavailable, match="copy needs a CUDA GPU"):
        global_memory.copy(np.ones(16, np.float32))


@needs_gpu
def test_global_kernels_match_numpy():
    xp = backend.xp
    x = xp.asarray(np.random.default_rng().standard_normal(4096 * 8, dtype=np.float32))
    assert bool((global_memory.copy(x) == x).all())
    for stride in (1, 3, 8):
        assert bool((global_memory.read_strided(x, 1000, stride) == x[::stride][:1000]).all())
    total = float(global_memory.read_passes(x, 3, blocks=16).sum(dtype=xp.float64))
    assert total == pytest.approx(3 * float(x.sum(dtype=xp.float64)), rel=1e-4)
    with pytest.raises(ValueError, match="n must satisfy"):
        global_memory.read_strided(x, x.size, 2)
