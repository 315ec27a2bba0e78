"""Collectives: simulated ranks, cost models, topologies, real runs over MPI and NCCL."""
