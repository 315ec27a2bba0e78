"""Lesson 11, mixture of experts: gating, load balancing, capacity, expert parallelism, and the systems that serve them.

    from mlsys_lab.moe import top_k_gating, expert_capacity, assign_with_capacity, load_balancing_loss
    idx, weights = top_k_gating(logits, k=2)                       # (T, 2) experts and gates per token
    kept, slot = assign_with_capacity(idx, n_experts, expert_capacity(T, n_experts, 1.25, 2))

* :mod:`.gating`: routing: the one top-k (:func:`top_k_experts`), renormalised top-k and Switch gates, noisy
  logits, expert capacity and overflow (GShard priority, random second expert), the load-balancing loss.
* :mod:`.balancing`: DeepSeek-V3's auxiliary-loss-free bias balancing and ST-MoE's router z-loss.
* :mod:`.synthetic`: synthetic routed batches: skewed router logits, a routed batch as the explorer draws it,
  random inputs for the expert-FFN kernels.
* :mod:`.train`: a small MoE classifier trained by hand, with and without the load-balancing loss.
* :mod:`.systems`: the systems side: shrinking batches and arithmetic intensity, all-to-all bytes, parameter
  accounting (DeepSeek-V3, GShard), serving with expert parallelism.
* :mod:`.fused_gate`: the router's gate as one fused pass (numba) versus the chain of array operations.
* :mod:`.dispatch`: expert-parallel dispatch in the global view, every rank's (token, expert) rows to the experts'
  ranks in one all-to-all (the exercise ``ep_dispatch``; the capstone runs it on real ranks).
* :mod:`.mpi_dispatch`: expert parallelism over real MPI processes (``mpiexec``): all-to-all dispatch,
  local experts, all-to-all combine.

The expert-FFN kernels (loop, grouped GEMMs, one grouped-GEMM launch) are :mod:`mlsys_lab.kernels.moe.expert_ffn`;
the simulated expert-parallel layer of lesson 08 is :mod:`mlsys_lab.parallelism.ep`.
"""

from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.moe.gating import (
    assign_with_capacity,
    drop_fraction,
    expert_capacity,
    gates_dense,
    gshard_second_expert_mask,
    load_balancing_loss,
    noisy_logits,
    switch_gating,
    top_k_experts,
    top_k_gating,
)
from mlsys_lab.moe.synthetic import random_routing, route_batch, skewed_router_logits
from mlsys_lab.moe.systems import (
    DEEPSEEK_V3,
    GSHARD_600B,
    dispatch_bytes_per_gpu,
    expected_active_experts,
    expert_bytes_per_token,
    expert_ffn_intensity,
    expert_memory_per_device,
    tokens_per_expert,
)
from mlsys_lab.moe.train import MoEClassifierConfig, train_moe

__all__ = [
    "DEEPSEEK_V3", "GSHARD_600B", "MoEClassifierConfig", "assign_with_capacity", "dispatch_bytes_per_gpu",
    "drop_fraction", "expected_active_experts", "expert_dispatch", "expert_bytes_per_token", "expert_capacity",
    "expert_ffn_intensity", "expert_memory_per_device", "gates_dense", "gshard_second_expert_mask",
    "load_balancing_loss", "noisy_logits", "random_routing", "route_batch", "skewed_router_logits", "switch_gating",
    "tokens_per_expert", "top_k_experts", "top_k_gating", "train_moe",
]
