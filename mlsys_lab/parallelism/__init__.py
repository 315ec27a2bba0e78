"""Parallel training on simulated devices: DP, TP, SP, EP, PP, ZeRO/FSDP and a 3D planner.

Every strategy is written over *simulated ranks*: a Python list holds one array per device, the
local computation runs once per list entry, and the collectives of :mod:`mlsys_lab.parallelism.comm`
move data between entries while counting the bytes each rank sends. Each strategy is checked
against the single-device computation of :mod:`mlsys_lab.parallelism.model`.

The notes' three primitives are the vocabulary (see :mod:`~mlsys_lab.parallelism.comm`):

* **partition**: split a tensor over devices (ZeRO shards, pipeline stages, Megatron column/row splits);
* **replicate**: keep a full copy on each device (DDP's model replicas);
* **load / unload**: materialize a tensor only while it is live (FSDP's all-gather, then free).
"""
