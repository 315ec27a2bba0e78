"""Collectives: simulated ranks, cost models, topologies, and real runs over MPI and NCCL (lesson 07).

=============== ==========================================================================================
network         the byte-counting ``Network`` of simulated ranks (one round = one ``exchange``)
simulate        ranks as NumPy arrays; naive/ring/tree/halving-doubling
                all-reduce, reduce-scatter, all-gather, broadcast, reduce, all-to-all
cost            the α-β model: ``allreduce_time``, bus bandwidth, crossovers, fitting, two-level collectives
topology        ring, tree, fat-tree, 2D/3D torus, fully connected: diameter, cables, bisection bandwidth
datapaths       link ratios from the presets; host copies; pinned vs pageable host-to-device copies
launch          ``mpiexec`` discovery (MPICH or Open MPI, root too) and ``run_mpi`` for the runners below
mpi_ring        runner: the course's ring on mpi4py ``Sendrecv`` vs ``MPI.Allreduce``
nccl_ring       runner: the same ring on NCCL send/recv (``cupyx.distributed``) vs NCCL's all-reduce
compression     top-k and PowerSGD with error feedback, stale-synchronous SGD, on a small real training run
overlap         DDP-style bucketed all-reduce overlapped with backward; stale-synchronous wall-clock
=============== ==========================================================================================
"""
