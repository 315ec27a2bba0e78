"""Do the blocked matmul and the cache simulator reject bad input before their numba kernels (issue #19)?"""

import numpy as np
import pytest

from mlsys_lab.loops import cache_model
from mlsys_lab.loops.matmul import matmul_blocked

A = np.ones((8, 8))


@pytest.mark.parametrize("call, text", [
    (lambda: matmul_blocked(A, A, 0), r"out must be a 2-D NumPy array of floats; got int"),
    (lambda: matmul_blocked(A, A, np.ones((8, 4))), r"a \(m, k\), b \(k, n\) and out \(m, n\) must agree"),
    (lambda: matmul_blocked(A, A, np.ones((8, 8)), order=[]), r"order must be one of"),
    (lambda: matmul_blocked(A, np.ones((8, 8), dtype=int), np.ones((8, 8))), r"b must be an array of numbers"),
    (lambda: cache_model.simulate_matmul_misses(8, cache_bytes=10**30), r"cache_bytes must be an integer between"),
    (lambda: cache_model.simulate_matmul_misses(8, element_bytes=0), r"element_bytes must be an integer between 1"),
    (lambda: cache_model.simulate_matmul_misses(8, line_bytes=60), r"line_bytes must be a multiple of 8"),
    (lambda: cache_model.matmul_trace(0), r"n must be an integer between 1"),
    (lambda: cache_model.matmul_trace(8, tile=9), r"tile must be an integer between 1"),
    (lambda: cache_model.matmul_trace(8, order="ijj"), r"order must be one of"),
    (lambda: cache_model.matmul_trace(8, element_bytes=32), r"element_bytes must be an integer between 1"),
    (lambda: cache_model.simulate_matmul_misses(8, order=np.empty(0)), r"order must be one of"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()
