"""Does the generated fused kernel read each input once, keep intermediates in registers, and compute the chain?"""

import numpy as np
from operators.programs import assert_close, chain, randn

from mlsys_lab.backend import asnumpy
from mlsys_lab.operators import fuse_elementwise, trace


def test_generated_cpu_loop_computes_the_chain_in_one_pass():
    fused = fuse_elementwise(trace(chain, (4, 8), (4, 8), (8,)), target="cpu")
    kernel = fused.nodes[-1].attrs["kernel"]
    assert kernel.inputs == ("t0", "t1", "t2") and kernel.shape == (4, 8)
    assert "math.tanh" in kernel.source and kernel.source.count("out0[i, j] =") == 1  # one write per element
    a, b, c = (asnumpy(randn(*s)) for s in ((4, 8), (4, 8), (8,)))
    assert_close(kernel(a, b, c), np.tanh(a * b + c) * 0.5 + 1.0, rtol=1e-6)
