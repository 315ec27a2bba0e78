"""Do routing, balancing and the MoE size arithmetic reject bad input by name (issue #19)?"""

import math

import numpy as np
import pytest

from mlsys_lab.moe import balancing, gating, systems


@pytest.mark.parametrize("call, text", [
    (lambda: gating.top_k_experts(0, 1), r"scores must have 2 dimensions"),
    (lambda: gating.switch_gating("ab"), r"logits must be an array of numbers"),
    (lambda: gating.gates_dense(np.zeros((4, 2), int), np.ones((4, 2)), 0), r"n_experts must be an integer between"),
    (lambda: gating.expert_fractions(np.array([0, 5]), 4), r"expert_indices must lie in \[0, 3\]"),
    (lambda: gating.gshard_second_expert_mask(np.full((4, 2), 0.5), 0), r"rng must be a Generator"),
    (lambda: gating.assign_with_capacity(np.zeros((4, 2), int), 10**30, 2), r"n_experts must be an integer between"),
    (lambda: balancing.router_z_loss("ab"), r"logits must be an array of numbers"),
    (lambda: balancing.update_bias(np.zeros(3), np.array([1.0, math.nan, 2.0]), 0.1), r"load must hold finite"),
    (lambda: balancing.update_bias(np.zeros(3), np.ones(3), math.inf), r"speed must be a finite number"),
    (lambda: systems.MoEModel("m", 64, 2, 2, 0, 128, 8, 0, 9, 0, 100), r"top_k must be an integer between 1 and 8"),
    (lambda: systems.expert_bytes_per_token(8, 2, 8, 2, 1e6, expert_parallel=0), r"expert_parallel must be True"),
])
def test_bad_input_names_the_parameter(call, text):
    with pytest.raises((ValueError, TypeError), match=text):
        call()


def test_a_negative_bias_is_a_real_value():
    """DeepSeek-V3's selection bias ranks experts only: it may go below zero, and stays accepted."""
    bias = balancing.update_bias(np.array([-0.5, 0.0, 0.5]), np.array([5, 1, 3]), 0.1)
    np.testing.assert_allclose(bias, [-0.6, 0.1, 0.5])
