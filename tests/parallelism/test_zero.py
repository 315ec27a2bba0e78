"""Do the ZeRO formulas reproduce the paper's table, and does a ZeRO Adam step on simulated ranks agree?"""

import pytest

from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import max_relative_error_of_params
from mlsys_lab.parallelism.zero import (
    asymptotic_savings,
    init_adam_state,
    offload_step_overhead,
    offload_transfer_bytes,
    reference_adam_step,
    zero_adam_step,
    zero_communication_bytes,
    zero_memory_breakdown,
    zero_memory_per_gpu,
    zero_savings,
)

# ZeRO paper (Rajbhandari et al. 2020) Table 1, 7.5B model, GB per GPU: N_d -> (P_os, P_os+g, P_os+g+p)
ZERO_TABLE_7B5 = {1: (120, 120, 120), 4: (52.5, 41.3, 30), 16: (35.6, 21.6, 7.5), 64: (31.4, 16.6, 1.88),
                  256: (30.4, 15.4, 0.47), 1024: (30.1, 15.1, 0.12)}


@pytest.mark.parametrize("n_gpus", sorted(ZERO_TABLE_7B5))
def test_zero_memory_reproduces_paper_table_1(n_gpus):
    assert zero_memory_per_gpu(7.5e9, n_gpus, 0) == pytest.approx(120e9)
    for stage, paper_gb in zip((1, 2, 3), ZERO_TABLE_7B5[n_gpus], strict=True):
        assert zero_memory_per_gpu(7.5e9, n_gpus, stage) / 1e9 == pytest.approx(paper_gb, abs=0.051)


def test_zero_savings_approach_4_and_8_only_asymptotically():
    """The notes' 4x and 8x are limits: at N_d = 64 they are 3.8x and 7.2x."""
    assert zero_savings(64, 1) == pytest.approx(120 / 31.40625)
    assert zero_savings(64, 2) == pytest.approx(120 / 16.640625)
    assert zero_savings(64, 3) == pytest.approx(64)
    assert zero_savings(10**6, 1) == pytest.approx(asymptotic_savings(1), rel=1e-4)
    assert zero_savings(10**6, 2) == pytest.approx(asymptotic_savings(2), rel=1e-4)


def test_zero_communication_and_offload():
    psi = 1e9
    assert zero_communication_bytes(psi, 8, 3) / zero_communication_bytes(psi, 8, 0) == pytest.approx(1.5)
    assert zero_communication_bytes(psi, 8, 1, ring=False) == pytest.approx(2 * psi * 2)
    parts = zero_memory_breakdown(psi, 8, 3, offload_optimizer=True, offload_params=True)
    assert parts["optimizer"] == 0 and parts["params"] == 0
    assert parts["cpu_bytes"] == pytest.approx((12 + 2) * psi / 8)
    with pytest.raises(ValueError, match="offload_params needs stage=3"):
        zero_memory_breakdown(psi, 8, 1, offload_params=True)
    with pytest.raises(ValueError, match="stage must be one of"):
        zero_memory_per_gpu(psi, 8, 4)


def test_offload_moves_4_psi_per_step_and_its_cost_shrinks_with_tokens():
    assert offload_transfer_bytes(1e9) == 4e9  # ZeRO-Offload §4: 4M bytes for M parameters, one GPU
    assert offload_transfer_bytes(7.5e9, 8) == 3.75e9
    cost = offload_step_overhead(7.5e9, 8, tokens_per_gpu=16384, pcie_bytes_per_s=50e9, peak_flop_per_s=1e15, mfu=0.5)
    assert cost["transfer_s"] == pytest.approx(0.075)
    assert cost["compute_s"] == pytest.approx(6 * 7.5e9 * 16384 / 5e14)
    small = offload_step_overhead(7.5e9, 8, tokens_per_gpu=1024, pcie_bytes_per_s=50e9, peak_flop_per_s=1e15)
    assert small["ratio"] > cost["ratio"]
    with pytest.raises(ValueError, match="mfu must be a number"):
        offload_step_overhead(7.5e9, 8, 1024, 50e9, 1e15, mfu=0)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_adam_equals_single_device_adam(block_problem, block_config, stage):
    """Two ZeRO Adam steps on 4 ranks give the single-device parameters, and the paper's bytes."""
    blocks, x, t = block_problem(8, n_layers=3, batch=8)
    head_dim = block_config.head_dim
    _, ref, ref_state = reference_adam_step(x, t, blocks, head_dim, init_adam_state(blocks), 1e-2)
    _, ref, _ = reference_adam_step(x, t, ref, head_dim, ref_state, 1e-2)
    _, new, state, _ = zero_adam_step(x, t, blocks, head_dim, 4, stage, 1e-2)
    log = comm.CommLog()
    _, new, _, held = zero_adam_step(x, t, new, head_dim, 4, stage, 1e-2, state, log)
    assert max_relative_error_of_params(new, ref) < 1e-10
    psi = sum(v.size for b in blocks for v in b.values())  # 3 blocks × 2080: divisible by 4, no padding
    factor = 3 if stage == 3 else 2
    assert log.total_bytes == pytest.approx(factor * 3 / 4 * psi * 8)
    assert held["optimizer"] == (2 * psi if stage == 0 else 2 * psi // 4)
    assert held["grads"] <= (psi if stage < 2 else psi // 4 + 2080)
