"""Does expert parallelism's all-to-all dispatch and combine give the single-device MoE layer?"""

import numpy as np
import pytest

from mlsys_lab.backend import xp
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.ep import MoEConfig, ep_moe_forward, init_moe, moe_forward


@pytest.mark.parametrize("n_ranks", [1, 2, 4, 8])
def test_expert_parallel_equals_single_device(n_ranks):
    cfg = MoEConfig(d_model=16, d_ff=24, n_experts=8, top_k=2)
    params = init_moe(cfg, seed=n_ranks)
    x = xp.asarray(np.random.default_rng(n_ranks).normal(size=(32, 16)))
    log = comm.CommLog()
    y, counts = ep_moe_forward(x, params, n_ranks, log)
    assert float(xp.max(xp.abs(y - moe_forward(x, params)))) < 1e-12
    assert counts.sum() == 32 * 2
    assert log.calls["all_to_all"] == 2  # dispatch and combine
