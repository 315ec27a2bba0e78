"""The example programs and helpers the graph tests share: small functions to trace, fresh random inputs."""

import numpy as np

from mlsys_lab.backend import asnumpy, xp
from mlsys_lab.operators import (
    causal_mask,
    exp,
    gelu,
    layernorm,
    matmul,
    reduce_sum,
    relu,
    sigmoid,
    softmax,
    tanh,
    transpose,
)

RNG = np.random.default_rng()


def randn(*shape):
    """Fresh random float32 input on the backend (CuPy on a GPU, NumPy otherwise)."""
    return xp.asarray(RNG.standard_normal(shape, dtype=np.float32))


def assert_close(got, expected, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(asnumpy(got), asnumpy(expected), rtol=rtol, atol=atol)


def chain(a, b, c):
    return tanh(a * b + c) * 0.5 + 1.0


def attention(q, k, v):
    return softmax(causal_mask(matmul(q, transpose(k)) * 0.125)) @ v


def mlp_block(x, w1, b1, w2, gamma, beta):
    h = layernorm(x, gamma, beta)
    return x + gelu(h @ w1 + b1) @ w2


def branches(x):
    a, b, c, d = exp(x), tanh(x), sigmoid(x), relu(x)
    return reduce_sum(a) + reduce_sum(b) + reduce_sum(c) + reduce_sum(d)
