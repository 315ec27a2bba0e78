"""Lesson 11, mixture of experts: gating, load balancing, capacity, expert parallelism, and the systems that serve them.

* :mod:`.fused_gate`: The router's gate as one fused pass versus the usual chain of array operations (Fused
  MoE Kernels).
* :mod:`.gating`: Mixture-of-experts routing: gates, top-k, capacity and overflow, and the load-balancing
  loss.
* :mod:`.mpi_dispatch`: Expert parallelism over real MPI processes: all-to-all dispatch, local experts,
  all-to-all combine.
* :mod:`.systems`: The systems side of mixture of experts: shrinking batches, all-to-all, and parameter accounting.
* :mod:`.train`: Train a small mixture-of-experts classifier by hand, with and without the load-balancing loss.
"""
