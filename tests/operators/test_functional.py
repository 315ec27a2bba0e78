"""Do the operators compute on arrays what they record on proxies?"""

import numpy as np
from operators.programs import assert_close, chain, randn

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.operators import run_eager, softmax, trace


def test_the_same_function_runs_eagerly_on_arrays():
    a, b, c = randn(4, 8), randn(4, 8), randn(8)
    assert_close(chain(a, b, c), np.tanh(asnumpy(a) * asnumpy(b) + asnumpy(c)) * 0.5 + 1.0, rtol=1e-6)
    graph = trace(chain, (4, 8), (4, 8), (8,))
    assert_close(run_eager(graph, a, b, c), chain(a, b, c), rtol=1e-6)


def test_softmax_of_an_array_by_hand():
    x = xp.asarray(np.array([[0.0, np.log(3.0)]], dtype=np.float32))  # exp: 1 and 3 -> 1/4 and 3/4
    assert_close(softmax(x), np.array([[0.25, 0.75]]))
    assert_close(asnumpy(softmax(randn(3, 5))).sum(axis=-1), np.ones(3))
