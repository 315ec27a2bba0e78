"""Parallel training on simulated devices: DP, TP, SP, EP, PP, ZeRO/FSDP and a 3D planner (lesson 08).

Every strategy is written over *simulated ranks*: a Python list holds one array per device, the
local computation runs once per list entry, and the collectives of :mod:`mlsys_lab.parallelism.comm`
(lesson 07's simulated collectives, on tensors) move data between entries while counting the bytes
each rank sends. Each strategy is checked against the single-device computation of
:mod:`mlsys_lab.parallelism.model`.

The notes' three primitives are the vocabulary (see :mod:`~mlsys_lab.parallelism.comm`):

* **partition**: split a tensor over devices (ZeRO shards, pipeline stages, Megatron column/row splits);
* **replicate**: keep a full copy on each device (DDP's model replicas);
* **load / unload**: materialize a tensor only while it is live (FSDP's all-gather, then free).

========  ===========================================================================================
comm      partition, replicate, all_reduce / reduce_scatter / all_gather / all_to_all on N-D tensors
          (lesson 07's ring and pairwise collectives), point-to-point send, and the ``CommLog`` of bytes
model     the single-device reference: a pre-norm transformer block with a hand-written backward
dp        data parallelism: gradients all-reduced; DDP's bucketed overlap as timeline events
tp        Megatron tensor parallelism (column/row splits, f and g); timing one rank's MLP shards
sp        Megatron sequence parallelism: TP's all-reduces split into reduce-scatter + all-gather
ep        expert parallelism: a mixture-of-experts layer with all-to-all dispatch and combine
pp        pipeline schedules (GPipe, 1F1B, interleaved): bubble formula, simulation, a real pipelined step
zero_bubble  ZB-H1 (Qi et al. 2023): the backward split into B and W, simulated beside 1F1B
zero      ZeRO stages 0–3 and offload: memory and bytes per GPU, a ZeRO Adam step on simulated ranks
fsdp      the small MLP of the FSDP exercise: one layer's forward/backward, flat shards, single-device SGD
fsdp_timeline  FSDP's step on two streams: prefetching the next gather, hybrid sharding (HSDP)
bounds    when each axis turns communication-bound: the per-axis thresholds (C/W) of the JAX scaling book
timeline  events on device streams: idle time, exposed communication, the raster the figures draw
planner   the 3D (DP × TP × PP × ZeRO) planner, checked against Megatron-LM's published runs
mpi_run   runner: the DP and TP steps across real MPI processes (through :func:`mlsys_lab.mpi.run_mpi`)
========  ===========================================================================================

The main functions are importable from here:
``from mlsys_lab.parallelism import zero_memory_per_gpu, pipeline_bubble_fraction``.
"""

from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.bounds import dp_critical_tokens, pp_critical_width_layers, tp_critical_hidden
from mlsys_lab.parallelism.comm import CommLog
from mlsys_lab.parallelism.dp import data_parallel_grads, ddp_timeline
from mlsys_lab.parallelism.fsdp_timeline import Interconnect, fsdp_state_bytes, fsdp_timeline
from mlsys_lab.parallelism.model import (
    BlockConfig,
    init_model,
    loss_and_grads,
    max_relative_error_of_params,
    n_params,
)
from mlsys_lab.parallelism.planner import (
    ClusterSpec,
    ModelSpec,
    Plan,
    estimate,
    megatron_models,
    predict_megatron_runs,
    rank_plans,
    selene,
)
from mlsys_lab.parallelism.pp import (
    peak_stashed_microbatches,
    pipeline_bubble_fraction,
    pipeline_loss_and_grads,
    simulate_schedule,
)
from mlsys_lab.parallelism.sp import sp_loss_and_grads
from mlsys_lab.parallelism.timeline import Event, stream_idle_fraction, timeline_summary
from mlsys_lab.parallelism.tp import shard_block, tp_loss_and_grads
from mlsys_lab.parallelism.zero import (
    zero_adam_step,
    zero_communication_bytes,
    zero_memory_breakdown,
    zero_memory_per_gpu,
    zero_savings,
)
from mlsys_lab.parallelism.zero_bubble import simulate_fbw, zb_h1_idle_formula, zb_h1_orders

__all__ = [
    "BlockConfig", "ClusterSpec", "CommLog", "Event", "Interconnect", "ModelSpec", "Plan", "comm",
    "data_parallel_grads", "ddp_timeline", "dp_critical_tokens", "estimate", "fsdp_state_bytes", "fsdp_timeline",
    "init_model", "loss_and_grads", "max_relative_error_of_params", "megatron_models", "n_params",
    "peak_stashed_microbatches", "pipeline_bubble_fraction", "pipeline_loss_and_grads", "pp_critical_width_layers",
    "predict_megatron_runs", "rank_plans", "selene", "shard_block", "simulate_fbw", "simulate_schedule",
    "sp_loss_and_grads", "stream_idle_fraction", "timeline_summary", "tp_critical_hidden", "tp_loss_and_grads",
    "zb_h1_idle_formula", "zb_h1_orders", "zero_adam_step", "zero_communication_bytes", "zero_memory_breakdown",
    "zero_memory_per_gpu", "zero_savings",
]
