"""A small random model, inputs and targets, shared by the strategy tests."""

import numpy as np
import pytest

from mlsys_lab.backend import xp
from mlsys_lab.parallelism.model import BlockConfig, init_model

CFG = BlockConfig(d_model=16, n_heads=4, d_ff=32)


@pytest.fixture
def block_problem():
    """``make(seed, n_layers=2, batch=4, seq=8)`` -> (blocks, x, target), x and target (batch, seq, 16)."""

    def make(seed, n_layers=2, batch=4, seq=8):
        g = np.random.default_rng(seed)
        x = xp.asarray(g.normal(size=(batch, seq, CFG.d_model)))
        t = xp.asarray(g.normal(size=(batch, seq, CFG.d_model)))
        return init_model(CFG, n_layers, seed), x, t

    return make


@pytest.fixture
def block_config():
    """The sizes ``block_problem`` builds its blocks with: d = 16, 4 heads of 4, MLP width 32."""
    return CFG
