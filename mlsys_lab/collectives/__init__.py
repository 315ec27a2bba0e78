"""Collectives: simulated ranks, cost models, topologies, and real runs over MPI and NCCL (lesson 07).

==================== =====================================================================================
network              the byte-counting ``Network`` of simulated ranks (one round = one ``exchange``), and
                     ``TwoLevelNetwork``: ranks on nodes, bytes booked to NVLink or to the NICs
simulate             ranks as arrays; naive/ring/tree/halving-doubling all-reduce, reduce-scatter,
                     all-gather, broadcast, reduce, all-to-all; the ring round by round (``ring_state``).
                     Lesson 08's :mod:`mlsys_lab.parallelism.comm` runs these same collectives on tensors
cost                 the α-β model: ``allreduce_time``, bus bandwidth, crossovers, fitting, two-level collectives
topology             ring, tree, fat-tree, 2D/3D torus, fully connected: diameter, cables, bisection bandwidth
datapaths            link ratios from the presets; host copies; pinned vs pageable host-to-device copies
launch               ``ring_benchmark`` and ``nccl_benchmark``: the runners below, started through the one MPI
                     launcher :func:`mlsys_lab.mpi.run_mpi`
mpi_ring             runner: the course's ring on mpi4py ``Sendrecv`` vs ``MPI.Allreduce``
nccl_ring            runner: the same ring on NCCL send/recv (``cupyx.distributed``) vs NCCL's all-reduce
gradient_compression top-k and PowerSGD with error feedback, stale-synchronous SGD, on a small real training run
overlap              DDP-style bucketed all-reduce overlapped with backward; stale-synchronous wall-clock
displaced_patches    DistriFusion's stale-activation patch parallelism, measured on Gaussian data
context_parallel     ring attention: K/V blocks round a ring with the online softmax; when the transfer hides
==================== =====================================================================================

The main functions are importable from here: ``from mlsys_lab.collectives import ring_allreduce, allreduce_time``.
(Nothing here imports the array backend or MPI: the runners choose their GPU before either starts.)
"""

from mlsys_lab.collectives.context_parallel import full_attention, overlap_block_tokens, ring_attention
from mlsys_lab.collectives.cost import (
    algorithm_bandwidth,
    allreduce_coefficients,
    allreduce_time,
    best_algorithm,
    bus_bandwidth,
    collective_time,
    crossover_bytes,
    fit_alpha_beta,
    hierarchical_allreduce_time,
)
from mlsys_lab.collectives.gradient_compression import make_least_squares_problem, train_compressed, train_stale
from mlsys_lab.collectives.launch import nccl_benchmark, ring_benchmark
from mlsys_lab.collectives.network import CollectiveResult, Network, TwoLevelNetwork
from mlsys_lab.collectives.overlap import bucketed_timeline, ssp_finish_times
from mlsys_lab.collectives.simulate import (
    ALLREDUCE_ALGORITHMS,
    all_gather,
    all_to_all,
    broadcast,
    halving_doubling_allreduce,
    naive_allreduce,
    reduce,
    reduce_scatter,
    ring_allreduce,
    ring_contributions,
    ring_state,
    tree_allreduce,
)
from mlsys_lab.collectives.topology import bisection_bandwidth, diameter, link_count

__all__ = [
    "ALLREDUCE_ALGORITHMS", "CollectiveResult", "Network", "TwoLevelNetwork", "algorithm_bandwidth", "all_gather",
    "all_to_all",
    "allreduce_coefficients", "allreduce_time", "best_algorithm", "bisection_bandwidth", "broadcast",
    "bucketed_timeline", "bus_bandwidth", "collective_time", "crossover_bytes", "diameter", "fit_alpha_beta",
    "full_attention", "overlap_block_tokens", "ring_attention",
    "halving_doubling_allreduce", "hierarchical_allreduce_time", "link_count", "make_least_squares_problem",
    "naive_allreduce", "nccl_benchmark", "reduce", "reduce_scatter", "ring_allreduce", "ring_benchmark",
    "ring_contributions", "ring_state", "ssp_finish_times", "train_compressed", "train_stale",
    "tree_allreduce",
]
