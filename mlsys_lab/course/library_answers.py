"""The lesson functions that answer an exercise as they are: used by a submission, they are flagged, not failed.

A graded run reports each use per exercise ("used `mlsys_lab....`"): the worker notices a call of one of them
while the learner's function answers the check (:func:`mlsys_lab.course.worker.serve`), and the grader notices its
name in the submitted cell (:func:`mlsys_lab.course.grade.library_answers_named`). The grade itself is the
instructor's call (README, instructor guide). Keys are exercise names, values ``"module:function"``.
"""

from __future__ import annotations

LIBRARY_ANSWERS: dict[str, tuple[str, ...]] = {
    "tensor_bytes": ("mlsys_lab.start_here.transfers:tensor_bytes",),
    "add_intensity": ("mlsys_lab.operators.cost:elementwise_cost",),
    "matmul_intensity": ("mlsys_lab.operators.cost:matmul_cost",),
    "assign_offsets": ("mlsys_lab.operators.memory_plan:plan_greedy_by_size",),
    "dynamic_schedule": ("mlsys_lab.operators.schedule:list_schedule",),
    "bias_gelu": ("mlsys_lab.kernels.operators.bias_gelu:bias_gelu",),  # the course's kernels, as they are
    "reduce_sum": ("mlsys_lab.kernels.roofline.reduce:sum_atomic",),
    "transpose_cuda": ("mlsys_lab.kernels.memory_hierarchy.shared_memory:transpose_on_gpu",),
    "softmax_xent_cuda": ("mlsys_lab.kernels.training_memory.softmax_xent:softmax_xent_on_gpu",),
    "softmax_rows_cuda": ("mlsys_lab.kernels.memory_hierarchy.fused:softmax_rows",
                          "mlsys_lab.kernels.memory_hierarchy.fused:softmax_rows_persistent"),
    "sgemm_tiled_cuda": ("mlsys_lab.kernels.memory_hierarchy.sgemm:sgemm",),
    "bf16_mma_cuda": ("mlsys_lab.kernels.memory_hierarchy.bf16_gemm:bf16_gemm",),
    "fuse_graph": ("mlsys_lab.operators.passes:fuse_elementwise",),
    "classify_bound": ("mlsys_lab.roofline.model:hierarchical_attainable",),
    "loads_in_flight": ("mlsys_lab.roofline.littles_law:loaded_latency",),
    "measure_on_roofline": ("mlsys_lab.roofline.model:place",),
    "legal_orders": ("mlsys_lab.loops.dependence:legal_orders",),
    "misses_per_iteration": ("mlsys_lab.loops.cache_model:misses_per_iteration",),
    "transformation_legal": ("mlsys_lab.loops.dependence:apply_transformation",),
    "sectors": ("mlsys_lab.memory_hierarchy.simt:sectors_per_request",),
    "bank_passes": ("mlsys_lab.memory_hierarchy.simt:shared_passes",
                    "mlsys_lab.memory_hierarchy.simt:bank_conflict_degree"),
    "grid_search": ("mlsys_lab.autotuning.search:factorial_grid",),
    "spearman": ("mlsys_lab.autotuning.stats:spearman",),
    "allreduce_time": ("mlsys_lab.collectives.cost:allreduce_time", "mlsys_lab.collectives.cost:collective_time"),
    "zero_memory": ("mlsys_lab.parallelism.zero:zero_memory_per_gpu",),
    "ddp_schedule": ("mlsys_lab.parallelism.dp:ddp_bucket_schedule",),
    "one_f_one_b": ("mlsys_lab.parallelism.pp:schedule_ops", "mlsys_lab.capstone.pipeline:course_one_f_one_b"),
    "tp_mlp": ("mlsys_lab.capstone.tp:course_tp_mlp",),  # the capstone's pieces, as they are
    "goodput": ("mlsys_lab.fault_tolerance.reliability:expected_goodput",),
    "crash_safe_writer": ("mlsys_lab.fault_tolerance.checkpoint_io:write_atomic",),
    "lora_forward": ("mlsys_lab.peft.qlora:lora_linear",),
    "lora_param_count": ("mlsys_lab.peft.accounting:lora_params_for_shapes",),
    "softmax_cross_entropy": ("mlsys_lab.training_memory.autodiff:composed_softmax_cross_entropy",
                              "mlsys_lab.training_memory.autodiff:softmax_cross_entropy",
                              "mlsys_lab.capstone.operators:cross_entropy_with_grad"),
    "layer_norm_backward": ("mlsys_lab.capstone.operators:layer_norm_grad",),
    "lora_backward": ("mlsys_lab.peft.qlora:lora_linear_backward",),
    "nf4_quantize": ("mlsys_lab.peft.nf4:nf4_quantize", "mlsys_lab.training_memory.quantize:quantize_blockwise"),
    "qlora_step": ("mlsys_lab.peft.qlora:qlora_step",),
    "quantize_groupwise": ("mlsys_lab.training_memory.quantize:quantize",),
    "loss_scaler_step": ("mlsys_lab.training_memory.mixed_precision:loss_scaler_step",),  # the capstone's piece
    "route_with_capacity": ("mlsys_lab.moe.gating:assign_with_capacity",),
    "aux_loss": ("mlsys_lab.moe.gating:load_balancing_loss", "mlsys_lab.moe.gating:aux_loss_and_grad"),
    "ep_dispatch": ("mlsys_lab.moe.dispatch:expert_dispatch",),  # the capstone's piece, as it is
    "moe_permute_cuda": ("mlsys_lab.kernels.moe.permute:moe_permute",),
    "moe_unpermute_cuda": ("mlsys_lab.kernels.moe.permute:moe_unpermute",),
    "average_gradients": ("mlsys_lab.capstone.dp:average_gradients",),
    "attention_backward": ("mlsys_lab.capstone.operators:attention_vjp",),
}
