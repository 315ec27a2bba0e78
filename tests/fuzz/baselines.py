"""A valid call of each public function: from the table below, from defaults, or built from names and type hints.

The builder tries a few *combinations* of example values (all sizes small, all 4, all 8, ...) chosen from each
parameter's annotation and name, and keeps the first that returns within the time limit. A function none of
them satisfies counts as not covered; give it an entry in :data:`TABLE` to cover it.
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
import typing

import numpy as np
from fuzz.harness import POSITIONAL, copy_kwargs, hints_of, parameters, timed_call

COMBINATIONS = 6
BASELINE_LIMIT_S = 10.0  # the first call may compile (numba) or load records
_SMALL = re.compile(r"(^|_)(tp|pp|dp|ep|sp|cp|k|top_k|degree|stages?|ranks?|world|gpus?|nodes?|groups?|experts?|"
                    r"ways?|heads?|workers?|replicas?|rank|shards?|bits|micro\w*|n_\w+)($|_)")
_FRACTION = re.compile(r"fraction|prob|rate|ratio|dropout|efficiency|alpha|beta|momentum|p$|factor|overlap|sparsity")
_ARRAY = re.compile(r"^(x|y|a|b|w|v|q|k_?|grads?|gradient|weights?|logits|scores|values|tokens|data|array|arr|"
                    r"matrix|m|u|inputs?|targets?|labels|params|dy|dx|out)$")




def two_stage_step(d, op):
    """A pipeline's dependency rule for two stages of (kind, micro-batch) ops: F after the previous stage's F, B
    after the next stage's B (or this stage's F at the last stage)."""
    from mlsys_lab.parallelism.pp import PipelineStep

    kind, mb = op
    needs = (("F", mb, d - 1) if d else None) if kind == "F" else (("B", mb, d + 1) if d < 1 else ("F", mb, d))
    return PipelineStep((kind, mb, d), needs, 1.0 if kind == "F" else 2.0, 0.0, f"{kind}{mb}", kind, mb)

def float32_softmax_xent(logits, labels):
    """A stand-in for the fused loss kernel on a CPU: its contract, float32 (loss, softmax − onehot)."""
    from mlsys_lab.kernels.training_memory.softmax_xent import softmax_xent_reference

    loss, dlogits = softmax_xent_reference(np.asarray(logits), np.asarray(labels))
    return loss.astype(np.float32), dlogits.astype(np.float32)

def _table() -> dict[str, typing.Callable[[], dict]]:
    """Hand-written baselines for what the builder cannot guess."""
    routed = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3]])  # (T=6, k=2) expert indices of 4
    gates = np.full((6, 2), 0.5)
    return {
        "mlsys_lab.moe.gating.load_balancing_loss": lambda: dict(
            router_probs=np.full((8, 4), 0.25), expert_indices=np.arange(8) % 4),
        "mlsys_lab.moe.gating.load_balancing_grad": lambda: dict(
            router_probs=np.full((8, 4), 0.25), expert_indices=np.arange(8) % 4),
        "mlsys_lab.moe.gating.aux_loss_and_grad": lambda: dict(
            router_logits=np.random.default_rng(0).normal(size=(8, 4)), k=2),
        # capacity 2 drops one pair, so the baseline's slots hold the documented -1 (dropped) too
        "mlsys_lab.moe.gating.assign_with_capacity": lambda: dict(indices=routed, n_experts=4, capacity=2),
        "mlsys_lab.moe.gating.drop_fraction": lambda: dict(indices=routed, n_experts=4, capacity_factor=1.0),
        "mlsys_lab.moe.gating.expert_fractions": lambda: dict(expert_indices=routed, n_experts=4),
        "mlsys_lab.moe.gating.gates_dense": lambda: dict(indices=routed, weights=gates, n_experts=4),
        "mlsys_lab.moe.gating.gshard_second_expert_mask": lambda: dict(weights=gates, rng=np.random.default_rng(0)),
        "mlsys_lab.hardware.Hardware": lambda: dict(name="toy", peak_flop_per_s={"fp32": 1e12},
                                                    memory_bandwidth_bytes_per_s=1e11, memory_bytes=1e9),
        # bf16 patterns are arrays of uint16 (the builder would guess an int from the name "bits")
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.from_bf16_bits": lambda: dict(
            bits=np.array([0x3F80, 0xC000, 0x0000, 0x4049], dtype=np.uint16)),
        # DeepSeek-V3's selection bias has either sign (it only ranks experts): a baseline with negative entries,
        # so that a negative bias coming back is not judged a silent negative result
        "mlsys_lab.moe.balancing.update_bias": lambda: dict(bias=np.array([-0.5, 0.0, 0.25, 1.0]),
                                                            load=np.array([5.0, 1.0, 3.0, 3.0]), speed=0.01),
    }


def _fields(record, *names) -> dict:
    """Some fields of a record the library built, as the keyword arguments of its dataclass."""
    return {name: getattr(record, name) for name in names}


def _typed_table() -> dict[str, typing.Callable[[], dict]]:
    """Baselines of targets whose argument checks reject the builder's guesses (float arrays for bf16 bit
    patterns, an int for a tuple of boxes): without them these targets would silently drop out of the suite."""
    from mlsys_lab.autotuning.search import random_search
    from mlsys_lab.collectives.simulate import ring_allreduce, ring_state
    from mlsys_lab.hardware import H200
    from mlsys_lab.kernels.roofline.littles_law import chase_order
    from mlsys_lab.memory_hierarchy.sgemm_ladder import shared_requests
    from mlsys_lab.memory_hierarchy.simt import SPACES
    from mlsys_lab.occupancy import occupancy
    from mlsys_lab.operators.cost import matmul_cost
    from mlsys_lab.operators.functional import relu, softmax
    from mlsys_lab.operators.ir import trace
    from mlsys_lab.operators.memory_plan import allocation_events, liveness, plan_greedy_by_size
    from mlsys_lab.peft.nf4 import double_quantize, nf4_quantize
    from mlsys_lab.training_memory.training import make_mlp

    rng = np.random.default_rng(0)

    def bits(*shape):  # bf16 patterns of small normal numbers
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    def graph():  # a traced graph: two matmuls, an elementwise chain to fuse, a softmax
        return trace(lambda x, w: softmax(relu(x @ w) * 2.0 + 1.0) @ w, (4, 8), (8, 8))

    table = dict(features=rng.standard_normal((12, 3)), seconds=np.exp(rng.standard_normal(12)))  # a measured space

    def intervals():
        return liveness(graph())

    qkv = lambda: dict(q=bits(1, 2, 8, 16), k=bits(1, 2, 8, 16), v=bits(1, 2, 8, 16), causal=False)  # noqa: E731
    return {
        # a 64 KiB copy (the default 64 MiB makes every call ~0.1 s, and the target's budget runs out)
        "mlsys_lab.collectives.datapaths.measure_host_copy": lambda: dict(n_bytes=2**16),
        "mlsys_lab.occupancy.limits_of": lambda: dict(attributes={
            "MaxRegistersPerMultiprocessor": 65536, "MaxSharedMemoryPerMultiprocessor": 233472,
            "MaxThreadsPerMultiProcessor": 2048, "MaxBlocksPerMultiprocessor": 32}),
        "mlsys_lab.occupancy.Occupancy": lambda: _fields(
            occupancy(64, 128, 16384), "blocks_per_sm", "warps_per_sm", "fraction", "limited_by"),
        "mlsys_lab.memory_hierarchy.sgemm_ladder.StepEvidence": lambda: dict(
            step="smem", registers=64, threads=1024, shared_bytes=8192, occupancy=occupancy(64, 1024, 8192),
            worst_request=shared_requests("smem")[0]),
        "mlsys_lab.parallelism.model.rms_norm": lambda: dict(x=np.linspace(-1, 1, 32).reshape(4, 8), gain=np.ones(8)),
        # one repeat of tiny GEMMs: a wall-clock measurement, kept to milliseconds a call
        "mlsys_lab.parallelism.tp.time_mlp_shards": lambda: dict(n_tokens=16, hidden=16, degrees=(1, 2), repeat=1),
        # a chain with c < 0 has a negative sum: a negative one coming back is then no "silent" result
        "mlsys_lab.kernels.roofline.littles_law.ffma_reference": lambda: dict(chains=4, iters=100, c=-0.5),
        **{f"mlsys_lab.kernels.training_memory.int8_matmul.{name}": lambda: dict(
            x=np.linspace(0.0, 1.0, 16).reshape(2, 8), codes=np.arange(32, dtype=np.int8).reshape(4, 8),
            scales=np.full(4, 0.01)) for name in ("int8_weight_matmul", "int8_weight_matmul_reference")},
        "mlsys_lab.collectives.simulate.RingState": lambda: _fields(
            ring_state(4, 3), "n_ranks", "step", "phase", "contributions", "bytes_sent_per_rank"),
        "mlsys_lab.collectives.network.CollectiveResult": lambda: _fields(
            ring_allreduce([np.arange(8.0)] * 4, record=True), "outputs", "bytes_sent", "bytes_received", "steps",
            "round_max_bytes", "snapshots"),
        # a small problem (the defaults take ~0.3 s a call, and the target's budget ran out)
        "mlsys_lab.collectives.displaced_patches.staleness_error": lambda: dict(
            n_pixels=16, n_steps=10, n_patches=4, n_samples=32),
        **{f"mlsys_lab.autotuning.search.{name}": lambda: dict(table, budget=6)
           for name in ("grid_search", "random_search", "model_guided_search")},
        "mlsys_lab.autotuning.search.search_curves": lambda: dict(table, strategy=random_search, budget=4, seeds=3),
        "mlsys_lab.autotuning.surrogate.check_table": lambda: dict(table),
        "mlsys_lab.autotuning.surrogate.cross_validated_predictions": lambda: dict(table, folds=3),
        "mlsys_lab.autotuning.surrogate.gp_posterior": lambda: dict(
            x_train=table["features"][:8], y_train=np.log(table["seconds"][:8]), x_query=table["features"][8:]),
        "mlsys_lab.autotuning.space.neighbour_jumps": lambda: dict(
            features=np.array([[a, b, c] for a in (1, 2) for b in (1, 2) for c in (4, 8)]),
            seconds=np.exp(rng.standard_normal(8))),
        "mlsys_lab.peft.nf4.double_quantize": lambda: dict(absmax=np.linspace(0.1, 1.0, 10), block_size2=4),
        "mlsys_lab.peft.nf4.double_dequantize": lambda: dict(
            zip(("codes", "scale", "mean"), double_quantize(np.linspace(0.1, 1.0, 10), 4), strict=True),
            block_size2=4),
        "mlsys_lab.peft.nf4.nf4_dequantize": lambda: dict(
            zip(("codes", "absmax"), nf4_quantize(np.linspace(-1.0, 1.0, 40), block_size=16), strict=True),
            block_size=16),
        **{f"mlsys_lab.operators.{name}": lambda: dict(graph=graph()) for name in (
            "ir.layout", "memory_plan.liveness", "memory_plan.peak_live_bytes", "memory_plan.allocation_events",
            "passes.eliminate_dead_code", "passes.fusion_groups", "passes.fuse_elementwise", "passes.replace_attention",
            "passes.reorder_for_memory", "compile.build_plan", "compile.compile_graph")},
        "mlsys_lab.operators.ir.Graph": lambda: _fields(graph(), "nodes", "inputs", "outputs"),
        "mlsys_lab.operators.passes.match_attention": lambda: dict(graph=graph(), node=graph().nodes[-1]),
        "mlsys_lab.operators.memory_plan.arena_bytes": lambda: dict(
            intervals=intervals(), offsets=plan_greedy_by_size(intervals())),
        "mlsys_lab.operators.memory_plan.plan_conflicts": lambda: dict(
            intervals=intervals(), offsets=plan_greedy_by_size(intervals())),
        "mlsys_lab.operators.memory_plan.simulate_naive_allocator": lambda: dict(events=allocation_events(graph())),
        "mlsys_lab.operators.memory_plan.simulate_caching_allocator": lambda: dict(events=allocation_events(graph())),
        "mlsys_lab.nn.accuracy": lambda: dict(logits=np.eye(4)[[0, 1, 2, 3, 0]], labels=np.array([0, 1, 2, 3, 1])),
        "mlsys_lab.nn.mse_loss": lambda: dict(prediction=np.linspace(-1, 1, 8), target=np.zeros(8)),
        # a dual number and a constant have either sign: negative baselines, so a negative one is not "silent"
        "mlsys_lab.training_memory.diff_modes.Dual": lambda: dict(value=-0.5, derivative=-2.0),
        "mlsys_lab.training_memory.diff_modes.const": lambda: dict(c=-1.5),
        "mlsys_lab.training_memory.recompute.CheckpointSweep": lambda: dict(
            segment_lengths=np.arange(1, 4), peak_activation_bytes=np.array([3e3, 2e3, 4e3]),
            n_block_forwards=np.array([5, 4, 3]), step_seconds=np.full(3, 1e-3)),
        "mlsys_lab.training_memory.training.MLP": lambda: _fields(make_mlp(3, 4, 2, 5), "stem", "blocks", "head"),
        # 20 steps, not 300: every call then takes milliseconds, so none is skipped or timed out
        "mlsys_lab.moe.train.train_moe": lambda: dict(aux_weight=0.01, steps=10, batch_size=64),
        "mlsys_lab.moe.train.MoERun": lambda: dict(
            aux_weight=0.01, load=np.full((3, 4), 0.25), aux_loss=np.ones(3), ce_loss=np.full(3, 1.5), accuracy=0.5,
            expert_of_cluster=np.full((2, 4), 0.25)),
        "mlsys_lab.operators.functional.layernorm": lambda: dict(
            x=np.linspace(-1, 1, 32).reshape(4, 8), weight=np.ones(8), bias=np.zeros(8)),
        # a short job (four intervals, failures rare): every call takes milliseconds, so no call is skipped
        "mlsys_lab.fault_tolerance.simulate.timeline": lambda: dict(
            work_seconds=40.0, interval=10.0, checkpoint_seconds=1.0, restart_seconds=2.0, mttf_seconds=1e4),
        "mlsys_lab.collectives.overlap.Timeline": lambda: dict(
            compute=((0.0, 1.0, 0),), comm=((0.5, 1.5, 1e6),), buckets=((0,),), backward_seconds=1.0,
            step_seconds=1.5),
        "mlsys_lab.collectives.topology.Topology": lambda: dict(
            name="ring", n_nodes=4, n_vertices=4, edges=((0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0), (3, 0, 1.0)),
            positions=np.zeros((4, 2))),
        "mlsys_lab.fault_tolerance.simulate.committed_work": lambda: dict(
            gaps=np.array([[100.0, 50.0, 200.0]]), interval=10.0, checkpoint_seconds=1.0, restart_seconds=2.0),
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.Bf16Step": lambda: dict(
            name="wmma", function="bf16_wmma", idea="toy", tile=(128, 128, 32), threads=256, dynamic_smem_bytes=0,
            smem_row_bytes=80, swizzled=False, grouped=False),
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.gemm_reference": lambda: dict(a_bits=bits(4, 8),
                                                                                  b_bits=bits(3, 8)),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention.attention_reference": qkv,
        "mlsys_lab.kernels.memory_hierarchy.flash_attention.attention_unfused": qkv,
        "mlsys_lab.kernels.roofline.littles_law.chase_reference": lambda: dict(nxt=chase_order(64), steps=10),
        "mlsys_lab.kernels.moe.permute.moe_permute_reference": lambda: dict(
            x=np.arange(12, dtype=np.float32).reshape(4, 3), expert=np.array([[0, 1], [0, 2], [0, 1], [1, 0]]),
            slot=np.array([[0, 1], [1, 0], [-1, -1], [0, -1]]), n_experts=3, capacity=2),
        "mlsys_lab.kernels.moe.permute.moe_unpermute_reference": lambda: dict(
            y=np.ones((3, 2, 3), dtype=np.float32), expert=np.array([[0, 1], [0, 2], [0, 1], [1, 0]]),
            slot=np.array([[0, 1], [1, 0], [-1, -1], [0, -1]]), weight=np.full((4, 2), 0.5, dtype=np.float32)),
        "mlsys_lab.kernels.moe.permute.moe_permute_bytes": lambda: dict(
            slot=np.array([[0, 1], [1, 0], [-1, -1], [0, -1]]), n_experts=3, capacity=2, d=3),
        "mlsys_lab.kernels.moe.permute.moe_unpermute_bytes": lambda: dict(
            slot=np.array([[0, 1], [1, 0], [-1, -1], [0, -1]]), d=3),
        "mlsys_lab.kernels.training_memory.softmax_xent.softmax_xent_reference": lambda: dict(
            logits=np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), labels=np.array([0, 3, 1], dtype=np.int32)),
        "mlsys_lab.kernels.operators.bias_gelu.bias_gelu_reference": lambda: dict(
            x=np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4), bias=np.full(4, 0.5, dtype=np.float32),
            scale=1.5),
        "mlsys_lab.memory_hierarchy.simt.TransposeAccess": lambda: dict(store_words=np.arange(32),
                                                                        load_words=np.arange(32) * 33),
        "mlsys_lab.memory_hierarchy.simt.WarpAccess": lambda: dict(
            space=SPACES[0], slots=np.zeros(32, dtype=int), cost=4, best_cost=4, efficiency=1.0),
        "mlsys_lab.memory_hierarchy.simt.sgemm_naive_addresses": lambda: dict(k_index=0, n_k=64, n_cols=64,
                                                                              coalesced=False),
        # parameters, their gradients and Adam's first moment have either sign
        "mlsys_lab.parallelism.zero.adam": lambda: dict(theta=np.linspace(-1, 1, 8), grad=np.full(8, 0.1),
                                                        m=np.zeros(8), v=np.zeros(8), t=1, lr=1e-3),
        "mlsys_lab.roofline.littles_law.LittleSweep": lambda: dict(
            label="hbm", inflight=np.array([1.0, 2.0, 4.0]), throughput=np.array([1.0, 2.0, 3.0]), latency=1.0,
            peak=3.0, unit="B/s"),
        "mlsys_lab.roofline.model.RooflinePoint": lambda: dict(
            hardware=H200, dtype="fp32", cost=matmul_cost(8, 8, 8), attainable_flops=1e12, seconds=1e-6,
            bound="memory-bound"),
        # symmetric codes and asymmetric zero points are signed
        "mlsys_lab.training_memory.quantize.Quantized": lambda: dict(
            codes=np.arange(-16, 16, dtype=np.int16).reshape(4, 8), scales=np.ones((4, 1), dtype=np.float32),
            zero_points=np.full((4, 1), -3.0, dtype=np.float32), bits=8, group_size=8),
    }


def _capstone_table() -> dict[str, typing.Callable[[], dict]]:
    """Lesson 12: a tiny transformer (every call milliseconds), its flat parameters, gradients and batches."""
    from mlsys_lab.capstone.dp import LocalGroup
    from mlsys_lab.capstone.model import (
        GPTConfig,
        course_ops,
        init_theta,
        views,
    )
    from mlsys_lab.capstone.operators import attention_vjp, cross_entropy_with_grad, layer_norm_grad
    from mlsys_lab.capstone.text import corpus
    from mlsys_lab.capstone.tp import TensorParallelGroup, course_tp_mlp
    from mlsys_lab.capstone.train import RunConfig, TrainState
    from mlsys_lab.collectives.network import Network
    from mlsys_lab.training_memory.mixed_precision import loss_scaler_step

    tiny = GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=1)
    run = RunConfig(model=GPTConfig(context=8, d_model=8, n_heads=2, n_layers=1), batch_size=2)
    ids = np.array([[1, 2, 3, 4], [0, 6, 5, 1]])

    def state(config=tiny):
        theta = init_theta(config)
        return TrainState(theta, np.zeros_like(theta), np.zeros_like(theta), 0)

    def heads(seed):  # (B, H, T, D) = (1, 2, 3, 2)
        return np.random.default_rng(seed).normal(size=(1, 2, 3, 2))

    grads = [{"w": np.array([1.0, -2.0]), "b": np.array([0.5])}, {"w": np.array([4.0, 8.0]), "b": np.array([-1.5])}]
    return {
        "mlsys_lab.capstone.model.gpt_forward": lambda: dict(theta=init_theta(tiny), idx=ids, config=tiny),
        "mlsys_lab.capstone.model.loss_and_grad": lambda: dict(theta=init_theta(tiny), idx=ids, targets=ids[:, ::-1],
                                                               config=tiny),
        "mlsys_lab.capstone.model.views": lambda: dict(theta=init_theta(tiny), config=tiny),
        "mlsys_lab.capstone.gradient_check.gradient_check": lambda: dict(
            config=GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=1, dtype="float64"), n_coords=3),
        "mlsys_lab.capstone.operators.cross_entropy_with_grad": lambda: dict(
            logits=np.linspace(-2, 2, 12).reshape(3, 4), labels=np.array([0, 3, 1]), label_smoothing=0.1,
            grad_out=np.full(3, 1 / 3)),
        "mlsys_lab.capstone.gpu_loss.kernel_cross_entropy": lambda: dict(launcher=float32_softmax_xent),
        "mlsys_lab.capstone.operators.layer_norm_grad": lambda: dict(x=np.linspace(-2, 2, 12).reshape(3, 4),
                                                                 grad_out=np.linspace(1, -1, 12).reshape(3, 4)),
        "mlsys_lab.capstone.text.global_batch": lambda: dict(tokens=corpus().tokens[:1000], step=3, batch_size=2,
                                                             context=8),
        "mlsys_lab.capstone.train.adam_update": lambda: dict(state=state(), grad=np.linspace(-1, 1, state().theta.size),
                                                             lr=1e-3),
        "mlsys_lab.capstone.train.run_step": lambda: dict(state=state(run.model), config=run,
                                                          tokens=corpus().tokens[:1000]),
        "mlsys_lab.capstone.train.train": lambda: dict(config=run, n_steps=2),
        "mlsys_lab.capstone.mixed_precision.train_mixed_precision": lambda: dict(
            config=run, n_steps=2, scaler_step=loss_scaler_step, growth_interval=1),
        "mlsys_lab.capstone.mixed_precision.MixedPrecisionLog": lambda: dict(
            losses=[2.0, 1.9], scales=[4.0, 8.0], skipped=[False, True], flushed_at_one=[0.01, 0.02],
            flushed_at_scale=[0.0, 0.001], seconds=0.5),
        # 1 × 2¹⁷ overflows fp16 and 2⁻⁴⁵ × 2¹⁷ flushes: the baseline shows both
        "mlsys_lab.capstone.mixed_precision.fp16_gradient": lambda: dict(
            grad=np.array([1.0, 2.0 ** -26, 2.0 ** -45, -0.25], dtype=np.float32), scale=2.0 ** 17),
        "mlsys_lab.capstone.mixed_precision.flushed_share": lambda: dict(
            grad=np.array([0.0, 1e-9, 1.0]), grad16=np.array([0.0, 0.0, 1.0], dtype=np.float16)),
        "mlsys_lab.training_memory.mixed_precision.loss_scaler_step": lambda: dict(
            grads16=np.array([1.0, -2.0, 0.5], dtype=np.float16), scale=1024.0, good_steps=0, growth_factor=2.0,
            backoff_factor=0.5, growth_interval=3),
        "mlsys_lab.capstone.tp.course_tp_mlp": lambda: dict(
            x=np.linspace(-1, 1, 12).reshape(1, 3, 4), w1=np.linspace(-1, 1, 32).reshape(4, 8),
            w2=np.linspace(1, -1, 32).reshape(8, 4), n_ranks=2, group=TensorParallelGroup(2)),
        "mlsys_lab.capstone.tp.tensor_parallel_mlp": lambda: dict(tp_mlp=course_tp_mlp, n_ranks=2),
        "mlsys_lab.capstone.tp.tensor_parallel_run": lambda: dict(config=run, n_steps=1, n_ranks=2),
        "mlsys_lab.capstone.train.held_out_loss": lambda: dict(theta=init_theta(run.model), config=run, n_batches=1),
        "mlsys_lab.capstone.train.sample": lambda: dict(theta=init_theta(run.model), config=run.model, prompt="Ay",
                                                        n_chars=3),
        "mlsys_lab.capstone.dp.average_gradients": lambda: dict(rank_grads=grads, rank_tokens=[3, 1],
                                                                group=LocalGroup(2)),
        "mlsys_lab.capstone.dp.ring_allreduce_on_ranks": lambda: dict(
            buffers=[np.arange(5.0), np.ones(5)], net=Network(2)),
        "mlsys_lab.capstone.model.ModelOps": lambda: dict(cross_entropy=cross_entropy_with_grad,
                                                          layer_norm_backward=layer_norm_grad,
                                                          attention_backward=attention_vjp),
        "mlsys_lab.capstone.operators.attention_vjp": lambda: dict(
            q=heads(1), k=heads(2), v=heads(3), probs=np.tril(np.full((1, 2, 3, 3), 1 / 3)), dy=heads(4), scale=0.5),
        "mlsys_lab.capstone.operators.causal_probs": lambda: dict(q=heads(1), k=heads(2), scale=0.5),
        "mlsys_lab.capstone.model.flatten": lambda: dict(arrays=views(init_theta(tiny), tiny), config=tiny),
        "mlsys_lab.capstone.text.Corpus": lambda: dict(tokens=np.array([0, 1, 2, 1], dtype=np.uint8), chars="abc"),
        "mlsys_lab.capstone.zero.slice_sizes": lambda: dict(n_params=10, n_ranks=3),
        "mlsys_lab.capstone.memory.rank_state_bytes": lambda: dict(config=tiny, n_ranks=2, rank=1, zero1=True),
        "mlsys_lab.capstone.memory.step_activation_bytes": lambda: dict(config=tiny, batch_rows=2),
        "mlsys_lab.capstone.memory.rank_memory_model": lambda: dict(config=tiny, batch_size=3, n_ranks=2, rank=1,
                                                                    zero1=True),
        "mlsys_lab.capstone.pipeline.course_one_f_one_b": lambda: dict(n_stages=2, n_microbatches=3),
        "mlsys_lab.capstone.ddp.grad_layers": lambda: dict(config=tiny),
        "mlsys_lab.capstone.ddp.grad_layer_bytes": lambda: dict(config=tiny),
        "mlsys_lab.capstone.ddp.bucketed_backward": lambda: dict(theta=init_theta(tiny), idx=ids, targets=ids[:, ::-1],
                                                                 config=tiny, ops=course_ops()),
        "mlsys_lab.capstone.ddp.fitted_allreduce": lambda: dict(n_ranks=2),
        "mlsys_lab.capstone.ddp.checked_plan": lambda: dict(schedule=_course_ddp_schedule(),
                                                            layer_seconds=[1e-3, 2e-3, 2e-3, 5e-4],
                                                            layer_bytes=[100, 400, 400, 50],
                                                            allreduce_seconds=_ring_cost, first_bucket_bytes=200,
                                                            bucket_cap_bytes=400),
        "mlsys_lab.capstone.pipeline.checked_orders": lambda: dict(schedule=_course_schedule(),
                                                                   n_microbatches=3),
        "mlsys_lab.capstone.pipeline.validate_orders": lambda: dict(
            orders=[[("F", 0), ("F", 1), ("B", 0), ("B", 1)], [("F", 0), ("B", 0), ("F", 1), ("B", 1)]], n_stages=2,
            n_microbatches=2),
        "mlsys_lab.capstone.pipeline.stage_layers": lambda: dict(config=tiny, stage=0),
        "mlsys_lab.capstone.pipeline.stage_slice": lambda: dict(config=tiny, stage=1),
        "mlsys_lab.capstone.pipeline.StageStep": lambda: dict(grad=np.zeros(4), losses=np.ones(3), peak_stashed=1,
                                                              timeline=[("F", 0, 0.0, 1e-3)]),
        **_capstone_peft_moe_table(),
    }


def _capstone_peft_moe_table() -> dict[str, typing.Callable[[], dict]]:
    """Lesson 12's LoRA fine-tune and mixture of experts, on the same tiny transformer (milliseconds a call)."""
    from mlsys_lab.capstone import ep
    from mlsys_lab.capstone import finetune as ft
    from mlsys_lab.capstone.model import GPTConfig, init_theta
    from mlsys_lab.capstone.moe import MoeConfig
    from mlsys_lab.capstone.train import RunConfig
    from mlsys_lab.moe.dispatch import expert_dispatch

    tiny = GPTConfig(vocab_size=62, context=8, d_model=8, n_heads=2, n_layers=1)
    tiny64 = GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=1, dtype="float64")
    moe64 = GPTConfig(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=1, dtype="float64", moe=MoeConfig())
    run = RunConfig(model=tiny, batch_size=2)
    lora = ft.LoraConfig(rank=2)

    def adapters():
        return ft.adapters_of(ft.init_adapters(tiny, lora) + 0.1, tiny, lora)

    logits = np.array([[0.5, -1.0, 2.0, 0.1], [1.5, 0.2, -0.3, 0.9], [0.0, 0.4, 1.1, -2.0]])
    return {
        "mlsys_lab.capstone.lora.Adapters": lambda: dict(a={"h0.proj": np.ones((8, 2))}, b={"h0.proj": np.ones((2, 8))},
                                                         scale=0.5),
        "mlsys_lab.capstone.finetune.LoraConfig": lambda: dict(rank=2, alpha=4.0, targets=("proj", "out")),
        "mlsys_lab.capstone.finetune.adapter_layout": lambda: dict(config=tiny, lora=lora),
        "mlsys_lab.capstone.finetune.lora_counts": lambda: dict(config=tiny, lora=lora),
        "mlsys_lab.capstone.finetune.init_adapters": lambda: dict(config=tiny, lora=lora, seed=1),
        "mlsys_lab.capstone.finetune.adapters_of": lambda: dict(phi=ft.init_adapters(tiny, lora), config=tiny,
                                                                lora=lora),
        "mlsys_lab.capstone.finetune.finetune_splits": lambda: {},
        "mlsys_lab.capstone.finetune.lora_held_out_loss": lambda: dict(theta=init_theta(tiny), config=run,
                                                                       adapters=adapters(), n_batches=1),
        "mlsys_lab.capstone.finetune.lora_finetune": lambda: dict(theta=init_theta(tiny), config=run, lora=lora,
                                                                  n_steps=2),
        "mlsys_lab.capstone.finetune.merge_adapters": lambda: dict(theta=init_theta(tiny), adapters=adapters(),
                                                                   config=tiny),
        "mlsys_lab.capstone.finetune.lora_gradient_check": lambda: dict(config=tiny64, lora=ft.LoraConfig(rank=1),
                                                                        n_coords=3),
        "mlsys_lab.capstone.moe.MoeConfig": lambda: dict(n_experts=4, top_k=2, capacity_factor=1.25, d_hidden=16,
                                                         aux_alpha=0.01, routing_groups=2),
        "mlsys_lab.capstone.moe.moe_layout": lambda: dict(d_model=8, moe=MoeConfig()),
        "mlsys_lab.capstone.moe.expert_params": lambda: dict(d_model=8, moe=MoeConfig()),
        "mlsys_lab.capstone.moe.capacity_routing": lambda: dict(logits=logits, k=2, capacity=2),
        "mlsys_lab.capstone.moe.gate_combine": lambda: dict(logits=logits, k=2, capacity=2),
        "mlsys_lab.capstone.moe.routing_stats": lambda: dict(indices=np.array([[0, 1], [0, 2]]),
                                                             kept=np.array([[True, True], [False, True]]), n_experts=4),
        "mlsys_lab.capstone.moe_train.MoeLog": lambda: dict(losses=[2.0, 1.5], seconds=0.1, dropped=[0.1, 0.0],
                                                            load=[np.full((1, 4), 0.25)] * 2),
        "mlsys_lab.capstone.moe_train.train_moe_model": lambda: dict(
            config=RunConfig(model=GPTConfig(vocab_size=62, context=8, d_model=8, n_heads=2, n_layers=1,
                                             moe=MoeConfig()), batch_size=2), n_steps=2),
        "mlsys_lab.capstone.moe_train.moe_gradient_check": lambda: dict(config=moe64, n_coords=3),
        # expert parallelism: the dispatch on 2 simulated ranks (the MPI ranks' classes are excluded: processes)
        "mlsys_lab.moe.dispatch.expert_dispatch": lambda: dict(
            tokens=[np.arange(6.0).reshape(3, 2), np.ones((2, 2))], experts=[np.array([3, 0, 2]), np.array([1, 3])],
            n_experts=4, n_ranks=2, group=ep.LocalAllToAll(2)),
        "mlsys_lab.capstone.ep.LocalAllToAll": lambda: dict(n_ranks=2),
        "mlsys_lab.capstone.ep.checked_dispatch": lambda: dict(dispatch=expert_dispatch),
        "mlsys_lab.capstone.ep.check_expert_parallel": lambda: dict(config=RunConfig(model=GPTConfig(
            vocab_size=62, context=8, d_model=8, n_heads=2, n_layers=1, moe=MoeConfig(routing_groups=2)), batch_size=2),
            n_ranks=2),
        "mlsys_lab.capstone.ep.sharded_names": lambda: dict(config=moe64),
    }


def _attention_backward_fp8_table() -> dict[str, typing.Callable[[], dict]]:
    """The FlashAttention backward reference (lesson 04) and the block-scaled FP8 GEMM (lesson 06), on tiny shapes."""
    from mlsys_lab.kernels.memory_hierarchy import flash_attention_backward as fab
    from mlsys_lab.training_memory import fp8

    rng = np.random.default_rng(0)
    q, k, v, do = (rng.standard_normal((1, 2, 5, 4)) for _ in range(4))
    o, lse = fab.attention_forward_lse(q, k, v)
    qa = lambda: fp8.quantize_fp8_blocks(rng.standard_normal((2, 256)))  # noqa: E731
    qb = lambda: fp8.quantize_fp8_blocks(rng.standard_normal((3, 256)), 128, 128)  # noqa: E731
    mh, tm = "mlsys_lab.kernels.memory_hierarchy.flash_attention_backward.", "mlsys_lab.training_memory."
    return {
        mh + "attention_forward_lse": lambda: dict(q=q, k=k, v=v, causal=True),
        mh + "attention_backward_dense": lambda: dict(q=q, k=k, v=v, do=do, causal=True),
        mh + "attention_backward_tiled": lambda: dict(q=q, k=k, v=v, o=o, do=do, lse=lse, block_rows=2, block_cols=3),
        mh + "attention_backward_flop": lambda: dict(batch=1, heads=2, seq=8, head_dim=4, causal=True),
        mh + "attention_backward_bytes": lambda: dict(batch=1, heads=2, seq=8, head_dim=4),
        mh + "AttentionBackwardBytes": lambda: dict(qkv=3.0, fused=2.0, stored_p=8.0),
        tm + "accounting.attention_backward_model_bytes": lambda: dict(
            shape=_tiny_transformer_shape(), batch=1, seq=16),
        tm + "fp8.e4m3_bits": lambda: dict(x=np.linspace(-500, 500, 9)),
        tm + "fp8.round_to_e4m3": lambda: dict(x=np.linspace(-500, 500, 9)),
        tm + "fp8.BlockScaledFp8": lambda: dict(codes=np.zeros((2, 4), np.uint8), scales=np.ones((2, 2), np.float32),
                                                 block=(1, 2)),
        tm + "fp8.quantize_fp8_blocks": lambda: dict(x=rng.standard_normal((4, 8)), block_rows=1, block_cols=4),
        tm + "fp8.dequantize_fp8_blocks": lambda: dict(q=qa()),
        tm + "fp8.outlier_activations": lambda: dict(rows=4, cols=8, n_outliers=2, factor=100.0),
        tm + "fp8.fp8_quantization_error": lambda: dict(x=rng.standard_normal((4, 8)), block_rows=1, block_cols=4,
                                                        outlier_columns=2),
        tm + "fp8_gemm.round_mantissa": lambda: dict(x=np.linspace(-3, 3, 7), mantissa_bits=5),
        tm + "fp8_gemm.fp8_block_gemm": lambda: dict(a=qa(), b=qb()),
        tm + "fp8_gemm.fp8_gemm_error_bound": lambda: dict(a=qa(), b=qb()),
        tm + "fp8_gemm.fp8_gemm_error_coefficient": lambda: dict(k=256),
        "mlsys_lab.kernels.memory_hierarchy.fp8_block_gemm.fp8_gemm_stages": lambda: dict(block_n=256),
        "mlsys_lab.kernels.memory_hierarchy.fp8_block_gemm.fp8_gemm_grid": lambda: dict(
            m=8192, n=8192, block_n=128, persistent=True, sm_count=132),
        **{f"mlsys_lab.memory_hierarchy.hopper.{name}": _hopper_record for name in (
            "attention_steps", "attention_vs_cudnn", "fp8_bound_use", "fp8_rows", "plot_attention", "target_ratios")},
        "mlsys_lab.memory_hierarchy.hopper.operand_bank_passes": lambda: {},
        "mlsys_lab.memory_hierarchy.hopper.AttentionRow": lambda: dict(head_dim=128, causal=False, seq=4096,
                                                                      tflops={"sdpa_cudnn": 600.0}, of_cudnn=0.9),
        "mlsys_lab.kernels.memory_hierarchy.fp8_block_gemm.fp8_gemm_smem_bytes": lambda: dict(block_n=128),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention_hopper.hopper_attention_stages": lambda: dict(head_dim=64),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention_hopper.hopper_attention_smem_bytes": lambda: dict(
            head_dim=128, stages=3),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention_hopper_backward.backward_stages": lambda: dict(
            head_dim=128),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention_hopper_backward.backward_smem_bytes": lambda: dict(
            kernel="attention_backward_dq", head_dim=64, stages=3),
    }


def _hopper_record() -> dict:
    """Lesson 04's recorded Hopper run (mlsys_lab/data)."""
    from mlsys_lab import records
    from mlsys_lab.memory_hierarchy import hopper

    return dict(record=records.load(hopper.RECORD))


def _tiny_transformer_shape():
    """A two-layer, four-head transformer shape (width 16)."""
    from mlsys_lab.training_memory.accounting import TransformerShape

    return TransformerShape("tiny", 2, 16, 4, 32)


TABLE = {**_table(), **_typed_table(), **_capstone_table(), **_attention_backward_fp8_table()}


def _literals(fn) -> list[str]:
    """String literals in a function's source: the choices a ``str`` parameter accepts, usually."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    found = []
    module = inspect.getmodule(fn)
    for key, value in vars(module).items() if module else ():  # choice tuples: ALGORITHMS = ("ring", ...)
        strings = isinstance(value, (tuple, list, frozenset, dict)) and value and all(isinstance(v, str) for v in value)
        if strings and not key.startswith("_"):
            found.extend(value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.+-]{1,24}",
                                                                                          node.value):
            found.append(node.value)
    return list(dict.fromkeys(found))


class Builder:
    """Finds and caches a baseline call per target; ``builder(qualified, target)`` -> (kwargs, result) or None."""

    def __init__(self):
        self.cache: dict[str, tuple[dict, object] | None] = {}
        self.instances: dict[object, object] = {}

    def __call__(self, qualified: str, target):
        if qualified not in self.cache:
            self.cache[qualified] = self._find(qualified, target)
        return self.cache[qualified]

    def _find(self, qualified: str, target):
        if qualified in TABLE:
            kwargs = TABLE[qualified]()
            status, result = timed_call(target, copy_kwargs(kwargs), BASELINE_LIMIT_S)
            return (kwargs, result) if status == "ok" else None
        hints = hints_of(target)
        literals = _literals(target)
        required = [p for p in parameters(target) if p.default is inspect.Parameter.empty]
        for combo in range(COMBINATIONS):
            try:
                kwargs = {p.name: self.example(p.name, hints.get(p.name, p.annotation), combo, literals)
                          for p in required}
            except LookupError:
                return None
            # the first try may compile or load data; the later ones get the ordinary limit
            status, result = timed_call(target, copy.deepcopy(kwargs), BASELINE_LIMIT_S if combo == 0 else 1.0)
            if status == "ok":
                return kwargs, result
            if not required:
                return None
        return None

    def instance(self, cls):
        """A valid instance of a library class, built from its own baseline."""
        if cls not in self.instances:
            self.instances[cls] = None
            base = self(f"{cls.__module__}.{cls.__qualname__}", cls)
            self.instances[cls] = None if base is None else base[1]
        if self.instances[cls] is None:
            raise LookupError(cls)
        return copy.deepcopy(self.instances[cls])

    def example(self, name: str, hint, combo: int, literals: list[str]):
        """An example value for one parameter in combination ``combo``."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, __import__("types").UnionType):
            hint = next((a for a in args if a is not type(None)), hint)
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is inspect.Parameter.empty:
            hint = np.ndarray if _ARRAY.match(name) else int
        if hint is bool:
            return bool(combo % 2)
        if hint is int:
            if _SMALL.search(name):
                return [2, 4, 8, 2, 1, 4][combo]
            return [64, 4, 8, 2, 1, 1024][combo]
        if hint is float:
            if _FRACTION.search(name):
                return [0.5, 0.5, 0.25, 0.1, 1.0, 0.5][combo]
            return [1.0, 4.0, 8.0, 2.0, 1e9, 0.5][combo]
        if hint is str:
            choices = [v for v in literals if v != name]
            return choices[combo % len(choices)] if choices else "x"
        if hint is np.ndarray:
            rng = np.random.default_rng(combo)
            shape = [(8, 8), (4, 4), (16,), (8, 4), (64, 64), (8,)][combo]
            return rng.standard_normal(shape)
        if hint is np.random.Generator:
            return np.random.default_rng(0)
        if origin in (tuple, list, typing.Sequence, typing.Iterable, __import__("collections.abc").abc.Sequence,
                      __import__("collections.abc").abc.Iterable):
            inner = args[0] if args else int
            item = self.example(name.rstrip("s"), inner, combo, literals)
            value = [item, copy.deepcopy(item)]
            return tuple(value) if origin is tuple else value
        if inspect.isclass(hint) and hint.__module__.startswith("mlsys_lab"):
            return self.instance(hint)
        raise LookupError(hint)


def _object_table() -> dict[str, typing.Callable[[], dict]]:
    """Baselines of the targets that take the library's own objects (a Graph, blocks of a model, a record, a
    state dict, a compiled numba function...) or structured plain data (dependency lists, expressions): each
    builds a small valid one with the library's constructors, so that every call takes milliseconds."""
    import importlib
    import math

    from mlsys_lab import backend, records
    from mlsys_lab.autotuning.space import recorded_space
    from mlsys_lab.collectives.network import Network
    from mlsys_lab.fault_tolerance import resume
    from mlsys_lab.hardware import H200
    from mlsys_lab.loops import single
    from mlsys_lab.moe import train as moe_train
    from mlsys_lab.nn import SGD
    from mlsys_lab.operators.functional import relu, softmax
    from mlsys_lab.operators.ir import trace
    from mlsys_lab.operators.plain import to_plain
    from mlsys_lab.parallelism import model as pmodel
    from mlsys_lab.parallelism import tp
    from mlsys_lab.parallelism.ep import MoEConfig, init_moe
    from mlsys_lab.parallelism.planner import ClusterSpec, ModelSpec, Plan, estimate, megatron_runs
    from mlsys_lab.parallelism.timeline import Event
    from mlsys_lab.parallelism.zero import init_adam_state
    from mlsys_lab.parallelism.zero_bubble import zb_h1_orders
    from mlsys_lab.peft import models as pm
    from mlsys_lab.peft import qlora
    from mlsys_lab.peft.accounting import LLAMA_7B
    from mlsys_lab.peft.nf4 import nf4_levels
    from mlsys_lab.training_memory import autodiff, diff_modes
    from mlsys_lab.training_memory.hogwild import sparse_regression
    from mlsys_lab.training_memory.training import make_mlp

    ft = importlib.import_module("mlsys_lab.peft.finetune")  # the package's `finetune` is the function
    quantize = importlib.import_module("mlsys_lab.training_memory.quantize")  # likewise
    rng = np.random.default_rng(0)
    cfg = pmodel.BlockConfig(d_model=8, n_heads=2, d_ff=16)

    def blocks(n=2):
        return pmodel.init_model(cfg, n)

    def xt(rows=4):  # a batch of two sequences of ``rows`` tokens and a regression target, (2, rows, d_model)
        g = np.random.default_rng(1)
        return g.standard_normal((2, rows, cfg.d_model)), g.standard_normal((2, rows, cfg.d_model))

    def graph():
        return trace(lambda x, w: softmax(relu(x @ w) * 2.0 + 1.0) @ w, (4, 8), (8, 8))

    def plain():
        nodes, outputs = to_plain(graph())
        return nodes, outputs

    def block_cache():
        x, _ = xt()
        return pmodel.block_forward(x, blocks(1)[0], cfg.head_dim)

    def attn_cache():
        x, _ = xt()
        p = blocks(1)[0]
        return pmodel.attention(x, p["wq"], p["wk"], p["wv"], p["wo"], cfg.head_dim)

    def mlp_cache():
        x, _ = xt()
        p = blocks(1)[0]
        return pmodel.mlp(x, p["w1"], p["w2"])

    def tp_forward():
        x, _ = xt()
        shards = tp.shard_block(blocks(1)[0], 2, cfg.n_heads)
        return [x.copy(), x.copy()], shards

    def sp_forward():
        x, _ = xt()
        shards = tp.shard_block(blocks(1)[0], 2, cfg.n_heads)
        return [x[:, :2].copy(), x[:, 2:].copy()], shards

    def moe_params():
        return init_moe(MoEConfig(d_model=8, d_ff=8, n_experts=4, top_k=2))

    def tiny_model():
        return ModelSpec(n_layers=4, hidden=256, n_heads=4, seq_len=128, vocab=1000)

    def tiny_cluster():
        return ClusterSpec(n_gpus=8, gpus_per_node=8, peak_flop_per_s=1e14, memory_bytes=8e10,
                           intra_node_bytes_per_s=3e11, inter_node_bytes_per_s=2.5e10)

    def peft_base():
        return pm.init_base(pm.TinyConfig())

    def peft_task(n=16):
        return ft.make_task("shifted", n, seed=3)

    def peft_forward():
        params, trainable = pm.add_method(peft_base(), "lora", rank=2)
        tokens = peft_task(8)[0]
        logits, cache = pm.forward(params, tokens)
        return params, trainable, logits, cache

    def qlora_state():
        g = np.random.default_rng(2)
        w1, w2 = g.standard_normal((8, 16)) / 3, g.standard_normal((16, 4)) / 4
        x, labels = qlora.shifted_task(w1, w2, 16)
        return qlora.init_qlora_state(w1, w2, rank=2, block_size=16), x, labels

    def moe_classifier():
        params = moe_train.init_moe_classifier()
        x, y = moe_train.make_cluster_task(16)[:2]
        out, cache = moe_train.moe_classifier_forward(params, x)
        return params, x, y, out, cache

    def mlp_model():
        return make_mlp(3, 4, 2, 5)

    def spiral():
        x = rng.standard_normal((8, 3)).astype(np.float32)
        return x, np.arange(8) % 5

    def events():
        return [Event("s0", 0.0, 1.0, "a", "forward"), Event("s1", 0.5, 2.0, "b", "send")]

    def tensor(shape=(4, 5)):
        return autodiff.Tensor(backend.xp.asarray(np.random.default_rng(4).standard_normal(shape)),
                               requires_grad=True)

    def sum_vectorized():
        single.sum_vectorized(np.arange(8.0))  # compiled here, before the per-call timer: a numba dispatcher
        return single.sum_vectorized

    expr = ("mul", ("sin", ("x",)), ("add", ("x",), ("const", 1.0)))
    deps = [(0, 1), (0, 2), (1, 3), (2, 3)]
    durations = [1.0, 2.0, 1.5, 0.5]
    tc_record = lambda: records.load("tensor_cores_h200")  # noqa: E731
    int_addresses = lambda: np.arange(32) * 4  # noqa: E731  (byte addresses of one warp, stride one word)
    return {
        # autotuning
        "mlsys_lab.autotuning.search.strategy_curves": lambda: dict(strategy="random", space=recorded_space(),
                                                                   budget=4, seeds=2),
        "mlsys_lab.autotuning.features.entry_body": lambda: dict(
            ptx=".visible .entry k(\n.param .u64 p\n)\n{\nadd.s32 %r1, %r2, %r3;\nret;\n}\n", entry="k"),
        "mlsys_lab.autotuning.features.ptxas_resources": lambda: dict(
            log="ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
                "ptxas info    : Used 32 registers, 1024 bytes smem, 360 bytes cmem[0]\n"),
        # backend and floor
        "mlsys_lab.backend.Selection": lambda: dict(name="numpy", module=np, reason="toy", device="CPU"),
        "mlsys_lab.backend.to_device": lambda: dict(values=(np.ones(3), 2.0)),
        "mlsys_lab.backend.to_host": lambda: dict(value=(np.ones(3), [np.zeros(2)])),
        "mlsys_lab.backend.sm_count": lambda: {},
        "mlsys_lab.records.load": lambda: dict(name="roofline_h200"),
        "mlsys_lab.records.path": lambda: dict(name="roofline_h200"),
        "mlsys_lab.records.provenance": lambda: dict(record=records.load("probe_h200")),
        "mlsys_lab.nn.cross_entropy": lambda: dict(logits=np.eye(4)[[0, 1, 2, 3]] * 2.0, labels=np.array([0, 1, 2, 0])),
        "mlsys_lab.nn.n_values": lambda: dict(params={"w": np.ones((2, 3)), "b": np.ones(3)}, names=("w", "b")),
        "mlsys_lab.start_here.transfers.tensor_bytes": lambda: dict(shape=(4, 8), dtype="fp16"),
        # collectives
        "mlsys_lab.collectives.context_parallel.RingAttentionResult": lambda: dict(
            output=np.zeros((4, 8)), bytes_sent=np.full(2, 64), steps=1, blocks_computed=np.array([2, 2])),
        "mlsys_lab.collectives.cost.fit_alpha_beta": lambda: dict(
            n_bytes=np.logspace(3, 6, 6), seconds=1e-5 + np.logspace(3, 6, 6) * 1e-10, algorithm="ring", n_ranks=4),
        "mlsys_lab.collectives.datapaths.link_ratio": lambda: dict(hardware=H200, fast="NVLink 4", slow="PCIe 5 x16"),
        "mlsys_lab.collectives.network.check_buffers": lambda: dict(buffers=[np.arange(4.0), np.ones(4)]),
        "mlsys_lab.collectives.network.make_result": lambda: dict(outputs=[np.ones(4), np.ones(4)], net=Network(2)),
        "mlsys_lab.collectives.overlap.bucketed_timeline": lambda: dict(
            layer_backward_seconds=np.full(4, 1e-3), layer_grad_bytes=np.full(4, 1e6), bucket_bytes=2e6, n_ranks=4,
            alpha=1e-5, beta=1e-10),
        "mlsys_lab.collectives.overlap.make_buckets": lambda: dict(grad_bytes_ready_order=[10, 10, 30, 5, 5],
                                                                  bucket_bytes=20.0),
        "mlsys_lab.collectives.overlap.ssp_finish_times": lambda: dict(
            compute_seconds=np.abs(rng.standard_normal((3, 5))) + 0.5, staleness=1),
        "mlsys_lab.collectives.simulate.all_to_all_pieces": lambda: dict(
            send=[[np.full(2, 10.0 * i + j) for j in range(3)] for i in range(3)]),
        # fault tolerance
        "mlsys_lab.fault_tolerance.reliability.failure_shares": lambda: dict(counts={"GPU": 5, "Host": 1}),
        "mlsys_lab.fault_tolerance.reliability.failures_by_category": lambda: dict(causes=[
            {"component": "GPU HBM3", "category": "GPU", "count": 3},
            {"component": "GPU SRAM", "category": "GPU", "count": 2},
            {"component": "Host", "category": "Host", "count": 1}]),
        "mlsys_lab.fault_tolerance.resume.digest": lambda: dict(state=resume.fresh_state()),
        "mlsys_lab.fault_tolerance.resume.to_bytes": lambda: dict(state=resume.fresh_state()),
        "mlsys_lab.fault_tolerance.resume.from_bytes": lambda: dict(data=resume.to_bytes(resume.fresh_state())),
        "mlsys_lab.fault_tolerance.resume.train_step": lambda: dict(
            zip(("x", "y"), _make_data(resume.CONFIG), strict=True), state=resume.fresh_state(),
            batch=resume.random_batches(1)[0]),
        "mlsys_lab.fault_tolerance.resume.uninterrupted": lambda: dict(batches=resume.random_batches(2)),
        "mlsys_lab.fault_tolerance.simulate.simulate_elastic": lambda: dict(
            policy="elastic", n_replicas=4, n_spares=1, replica_mttf_seconds=3600.0, repair_seconds=600.0,
            interval=300.0, checkpoint_seconds=10.0, restart_seconds=60.0, reform_seconds=30.0,
            horizon_seconds=4 * 3600.0, n_trials=2, seed=0),
        "mlsys_lab.hardware.preset": lambda: dict(name="NVIDIA H200 SXM"),
        # loops
        "mlsys_lab.loops.cache_model.inner_stride": lambda: dict(array="A", order="ijk"),
        "mlsys_lab.loops.dependence.apply_transformation": lambda: dict(vectors=[(1, -1), (0, 1)],
                                                                        matrix=[(1, 0), (1, 1)]),
        "mlsys_lab.loops.dependence.interchange_legal": lambda: dict(vectors=[(1, -1)], order=(0, 1)),
        "mlsys_lab.loops.dependence.permute": lambda: dict(vectors=[(1, -1), (0, 1)], order=(1, 0)),
        "mlsys_lab.loops.single.vector_instructions": lambda: dict(dispatcher=sum_vectorized()),
        "mlsys_lab.loops.single.vector_loop": lambda: dict(dispatcher=sum_vectorized()),
        "mlsys_lab.loops.single.vector_width": lambda: dict(counts={"xmm": 3, "ymm": 1, "zmm": 0}),
        # memory hierarchy
        "mlsys_lab.memory_hierarchy.sgemm_ladder.ladder_evidence": lambda: dict(
            record=records.load("memory_h200")["sgemm"]),
        "mlsys_lab.memory_hierarchy.simt.bank_conflict_degree": lambda: dict(word_indices=np.arange(32) * 2),
        "mlsys_lab.memory_hierarchy.simt.coalescing_efficiency": lambda: dict(byte_addresses=int_addresses()),
        "mlsys_lab.memory_hierarchy.simt.sectors_per_request": lambda: dict(byte_addresses=int_addresses()),
        "mlsys_lab.memory_hierarchy.simt.shared_passes": lambda: dict(byte_addresses=int_addresses()),
        "mlsys_lab.memory_hierarchy.tensor_cores.attention_fraction_by_length": lambda: dict(
            record=tc_record(), variant="d128_full"),
        "mlsys_lab.memory_hierarchy.tensor_cores.attention_rows": lambda: dict(record=tc_record()),
        "mlsys_lab.memory_hierarchy.tensor_cores.gemm_ladder": lambda: dict(record=tc_record()),
        "mlsys_lab.memory_hierarchy.tensor_cores.launch_overhead_rows": lambda: dict(record=tc_record()),
        "mlsys_lab.memory_hierarchy.tensor_cores.mma_shapes": lambda: dict(
            a_bits=np.zeros((64, 32), np.uint16), b_bits=np.zeros((128, 32), np.uint16)),
        "mlsys_lab.memory_hierarchy.tensor_cores.passes_of_phases": lambda: dict(
            words=np.arange(64).reshape(2, 32) * 4),
        "mlsys_lab.memory_hierarchy.tensor_cores.roofline_dots": lambda: dict(record=tc_record()),
        "mlsys_lab.memory_hierarchy.warp_sim.run_transpose": lambda: dict(
            kernel=_warp_sim().transpose_naive_block, a=np.arange(32 * 32.0).reshape(32, 32)),
        "mlsys_lab.memory_hierarchy.warp_sim.run_reduce": lambda: dict(kernel=_reduce_kernel, x=np.ones(64),
                                                                      block_elements=32),
        "mlsys_lab.memory_hierarchy.warp_sim.transpose_naive_block": lambda: dict(
            bx=0, by=0, A=_warp_sim().GlobalArray(np.arange(32 * 32.0), "A"),
            B=_warp_sim().GlobalArray(np.zeros(32 * 32), "B"), tile=_warp_sim().SharedArray(32 * 33), n_rows=32,
            n_cols=32),
        "mlsys_lab.memory_hierarchy.warp_sim.launch": lambda: dict(kernel=_noop_kernel, grid=(2,), arrays=[],
                                                                  shared_words=32),
        # moe
        "mlsys_lab.moe.balancing.biased_top_k": lambda: dict(scores=np.linspace(0, 1, 12).reshape(4, 3),
                                                             bias=np.array([0.0, 0.5, 0.0]), k=2),
        "mlsys_lab.moe.gating.noisy_logits": lambda: dict(
            x=np.ones((3, 4)), w_gate=np.full((4, 2), 0.1), w_noise=np.full((4, 2), 0.1),
            rng=np.random.default_rng(0)),
        "mlsys_lab.moe.train.moe_classifier_forward": lambda: dict(params=moe_classifier()[0],
                                                                   x=moe_classifier()[1]),
        "mlsys_lab.moe.train.moe_classifier_backward": lambda: (lambda p, x, y, out, cache: dict(
            params=p, cache=cache, dout=np.full(np.shape(out), 0.01), aux_weight=0.1))(*moe_classifier()),
        # operators
        "mlsys_lab.operators.codegen.FusedKernel": lambda: dict(source="x", inputs=("a",), outputs=("b",),
                                                                shape=(4,), run=len),
        "mlsys_lab.operators.compile.compile_function": lambda: dict(fn=lambda x, y: relu(x * y + 1.0)),
        "mlsys_lab.operators.eager.check_inputs": lambda: dict(
            graph=graph(), arrays=(np.ones((4, 8), np.float32), np.ones((8, 8), np.float32))),
        "mlsys_lab.operators.plain.from_plain": lambda: dict(zip(("nodes", "outputs"), plain(), strict=True)),
        "mlsys_lab.operators.plain.kernels_and_bytes": lambda: dict(nodes=plain()[0]),
        "mlsys_lab.operators.plain.run_plain": lambda: dict(
            nodes=plain()[0], outputs=plain()[1],
            arrays={"t0": np.ones((4, 8), np.float32), "t1": np.full((8, 8), 0.1, np.float32)}),
        "mlsys_lab.operators.ir.trace": lambda: {"fn": lambda x, w: relu(x @ w), POSITIONAL: [(4, 8), (8, 8)]},
        "mlsys_lab.operators.eager.run_eager": lambda: {
            "graph": graph(), POSITIONAL: [np.ones((4, 8), np.float32), np.full((8, 8), 0.1, np.float32)]},
        "mlsys_lab.operators.ir.matmul_proxy": lambda: dict(zip(("a", "b"), _proxies((4, 8), (8, 2)), strict=True)),
        "mlsys_lab.operators.ir.transpose_proxy": lambda: dict(x=_proxies((4, 8))[0]),
        "mlsys_lab.operators.codegen.elementwise_kernel": _elementwise_group,
        "mlsys_lab.operators.schedule.list_schedule": lambda: dict(durations=durations, deps=deps, n_workers=2),
        "mlsys_lab.operators.schedule.static_plan": lambda: dict(estimates=durations, deps=deps, n_workers=2),
        "mlsys_lab.operators.schedule.run_static": lambda: dict(durations=durations, deps=deps,
                                                                plan=[[0, 1, 3], [2]]),
        "mlsys_lab.operators.schedule.makespan": lambda: dict(rows=[(0, 0, 0.0, 1.0), (1, 1, 0.5, 2.0)]),
        # parallelism
        "mlsys_lab.parallelism.comm.all_gather": lambda: dict(shards=[np.ones((2, 3)), np.zeros((2, 3))]),
        "mlsys_lab.parallelism.comm.all_reduce": lambda: dict(buffers=[np.ones((2, 3)), np.arange(6.0).reshape(2, 3)]),
        "mlsys_lab.parallelism.comm.reduce_scatter": lambda: dict(buffers=[np.ones((4, 3)), np.ones((4, 3))]),
        "mlsys_lab.parallelism.comm.all_to_all": lambda: dict(
            send=[[np.full(2, 1.0), np.full(2, 2.0)], [np.full(2, 3.0), np.full(2, 4.0)]]),
        "mlsys_lab.parallelism.dp.data_parallel_grads": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), head_dim=cfg.head_dim, n_ranks=2),
        "mlsys_lab.parallelism.dp.ddp_bucket_schedule": lambda: dict(
            layer_backward_s=[1.0, 0.5, 2.0, 1.0], layer_grad_bytes=[4, 4, 8, 2], first_bucket_bytes=4,
            bucket_cap_bytes=8, allreduce_seconds=_ring_cost),
        "mlsys_lab.parallelism.dp.ddp_timeline": lambda: dict(
            layer_backward_seconds=np.full(4, 1e-3), layer_grad_bytes=np.full(4, 1e6), bucket_bytes=2e6,
            n_ranks=4, bandwidth_bytes_per_s=1e11),
        "mlsys_lab.parallelism.ep.moe_forward": lambda: dict(x=xt()[0][0], params=moe_params()),
        "mlsys_lab.parallelism.ep.ep_moe_forward": lambda: dict(x=xt()[0][0], params=moe_params(), n_ranks=2),
        "mlsys_lab.parallelism.fsdp.layer_forward": lambda: dict(h=np.ones((2, 3)), w=np.full((3, 4), 0.1),
                                                                 last=False),
        "mlsys_lab.parallelism.fsdp.layer_backward": lambda: (lambda out: dict(
            dout=np.ones((2, 4)), cache=out[1], w=np.full((3, 4), 0.1)))(
            _fsdp().layer_forward(np.ones((2, 3)), np.full((3, 4), 0.1), False)),
        "mlsys_lab.parallelism.fsdp.mlp_loss_and_grads": lambda: dict(
            x=np.ones((2, 3)), target=np.zeros((2, 2)), weights=[np.full((3, 4), 0.1), np.full((4, 2), 0.1)]),
        "mlsys_lab.parallelism.fsdp.sgd_reference": lambda: dict(
            x=np.ones((2, 3)), target=np.zeros((2, 2)), weights=[np.full((3, 4), 0.1), np.full((4, 2), 0.1)],
            lr=0.1),
        "mlsys_lab.parallelism.fsdp.unshard_flat": lambda: dict(
            shards=_fsdp().shard_flat(np.arange(6.0).reshape(2, 3), 2), shape=(2, 3)),
        "mlsys_lab.parallelism.fsdp_timeline.fsdp_timeline": lambda: dict(
            layer_param_bytes=[1e8] * 3, layer_forward_s=[1e-3] * 3, n_nodes=2),
        "mlsys_lab.parallelism.model.n_params": lambda: dict(blocks=blocks()),
        "mlsys_lab.parallelism.model.attention": lambda: (lambda x, p: dict(
            u=x, wq=p["wq"], wk=p["wk"], wv=p["wv"], wo=p["wo"], head_dim=cfg.head_dim))(xt()[0], blocks(1)[0]),
        "mlsys_lab.parallelism.model.attention_backward": lambda: dict(dout=xt()[1], cache=attn_cache()[1]),
        "mlsys_lab.parallelism.model.mlp": lambda: (lambda p: dict(u=xt()[0], w1=p["w1"], w2=p["w2"]))(blocks(1)[0]),
        "mlsys_lab.parallelism.model.mlp_backward": lambda: dict(dout=xt()[1], cache=mlp_cache()[1]),
        "mlsys_lab.parallelism.model.rms_norm_backward": lambda: dict(
            dy=xt()[1], cache=pmodel.rms_norm(xt()[0], np.ones(cfg.d_model))[1]),
        "mlsys_lab.parallelism.model.block_forward": lambda: dict(x=xt()[0], p=blocks(1)[0], head_dim=cfg.head_dim),
        "mlsys_lab.parallelism.model.block_backward": lambda: dict(dout=xt()[1], cache=block_cache()[1]),
        "mlsys_lab.parallelism.model.model_forward": lambda: dict(x=xt()[0], blocks=blocks(), head_dim=cfg.head_dim),
        "mlsys_lab.parallelism.model.model_backward": lambda: dict(
            dy=xt()[1], caches=pmodel.model_forward(xt()[0], blocks(), cfg.head_dim)[1]),
        "mlsys_lab.parallelism.model.loss_and_grads": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), head_dim=cfg.head_dim),
        "mlsys_lab.parallelism.model.sgd_update": lambda: dict(
            blocks=blocks(), grads=pmodel.loss_and_grads(*xt(), blocks(), cfg.head_dim)[1], lr=0.01),
        "mlsys_lab.parallelism.model.max_relative_error_of_params": lambda: dict(got=blocks(), ref=blocks()),
        "mlsys_lab.parallelism.planner.estimate": lambda: dict(
            model=tiny_model(), cluster=tiny_cluster(), plan=Plan(2, 2, 2, 1), global_batch=8),
        "mlsys_lab.parallelism.planner.Estimate": lambda: _fields(
            estimate(tiny_model(), tiny_cluster(), Plan(2, 2, 2, 1), 8), "plan", "n_microbatches", "memory_bytes",
            "seconds", "flop_per_s_per_gpu", "fits"),
        "mlsys_lab.parallelism.planner.calibrate_efficiency": lambda: dict(
            model=tiny_model(), cluster=tiny_cluster(), plan=Plan(2, 2, 2, 1), global_batch=8,
            measured_flop_per_s_per_gpu=1e12),
        "mlsys_lab.parallelism.planner.megatron_model": lambda: dict(run=megatron_runs()[0]),
        "mlsys_lab.parallelism.pp.pipeline_loss_and_grads": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), head_dim=cfg.head_dim, n_stages=2,
            n_microbatches=2),
        "mlsys_lab.parallelism.sp.sp_block_forward": lambda: (lambda xs, shards: dict(
            xs=xs, shards=shards, head_dim=cfg.head_dim))(*sp_forward()),
        "mlsys_lab.parallelism.sp.sp_block_backward": lambda: (lambda out: dict(
            douts=[np.ones_like(y) for y in out[0]], caches=out[1]))(
            _sp().sp_block_forward(*sp_forward(), cfg.head_dim)),
        "mlsys_lab.parallelism.sp.sp_loss_and_grads": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), n_heads=cfg.n_heads, n_ranks=2),
        "mlsys_lab.parallelism.timeline.stream_idle_fraction": lambda: dict(events=events()),
        "mlsys_lab.parallelism.timeline.timeline_raster": lambda: dict(events=events(), streams=["s0", "s1"],
                                                                      n_px=8),
        "mlsys_lab.parallelism.tp.shard_block": lambda: dict(p=blocks(1)[0], n_ranks=2, n_heads=cfg.n_heads),
        "mlsys_lab.parallelism.tp.tp_block_forward": lambda: (lambda xs, shards: dict(
            xs=xs, shards=shards, head_dim=cfg.head_dim))(*tp_forward()),
        "mlsys_lab.parallelism.tp.tp_block_backward": lambda: (lambda out: dict(
            douts=[np.ones_like(y) for y in out[0]], caches=out[1]))(tp.tp_block_forward(*tp_forward(), cfg.head_dim)),
        "mlsys_lab.parallelism.tp.tp_loss_and_grads": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), n_heads=cfg.n_heads, n_ranks=2),
        "mlsys_lab.parallelism.tp.unshard_grads": lambda: dict(shard_grads=[
            dict(g) for g in tp.shard_block(blocks(1)[0], 2, cfg.n_heads)]),
        "mlsys_lab.parallelism.zero.init_adam_state": lambda: dict(blocks=blocks()),
        "mlsys_lab.parallelism.zero.reference_adam_step": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), head_dim=cfg.head_dim,
            state=init_adam_state(blocks()), lr=1e-2),
        "mlsys_lab.parallelism.zero.zero_adam_step": lambda: dict(
            zip(("x", "target"), xt(), strict=True), blocks=blocks(), head_dim=cfg.head_dim, n_ranks=2, stage=2),
        "mlsys_lab.parallelism.zero_bubble.simulate_fbw": lambda: dict(orders=zb_h1_orders(2, 3)),
        "mlsys_lab.parallelism.pp.run_orders": lambda: dict(orders=[[("F", 0), ("B", 0)], [("F", 0), ("B", 0)]],
                                                            step_of=two_stage_step),
        "mlsys_lab.parallelism.pp.PipelineStep": lambda: dict(key=("F", 0, 0), needs=None, seconds=1.0, delay=0.0,
                                                              label="F0", kind="forward", microbatch=0),
        # peft
        "mlsys_lab.peft.accounting.base_bits_per_param": lambda: dict(quantization="nf4+dq"),
        "mlsys_lab.peft.accounting.lora_params_for_model": lambda: dict(model=LLAMA_7B, rank=4, targets=("q", "v")),
        "mlsys_lab.peft.accounting.peft_memory": lambda: dict(model="LLaMA-7B", rank=8, targets="q, v",
                                                              quantization="nf4+dq"),
        "mlsys_lab.peft.finetune.finetune": lambda: dict(base=peft_base(), method="lora", steps=2, rank=2),
        "mlsys_lab.peft.finetune.compare_methods": lambda: dict(base=peft_base(), methods=("head", "lora"), steps=2),
        "mlsys_lab.peft.finetune.identical_start": lambda: dict(base=peft_base(), method="lora", data=peft_task()),
        "mlsys_lab.peft.finetune.nf4_base": lambda: dict(base=peft_base()),
        "mlsys_lab.peft.finetune.qlora_finetune": lambda: dict(base=peft_base(), steps=2),
        "mlsys_lab.peft.finetune.step_seconds": lambda: dict(base=peft_base(), batch_size=4, rounds=1),
        "mlsys_lab.peft.finetune.task_accuracy": lambda: dict(params=peft_base(), data=peft_task()),
        "mlsys_lab.peft.finetune.train_classifier": lambda: dict(
            params=peft_base(), trainable=("head", "head_b"), data=peft_task(), steps=2, batch_size=8),
        "mlsys_lab.peft.models.add_method": lambda: dict(base=peft_base(), method="lora", rank=2),
        "mlsys_lab.peft.models.forward": lambda: dict(params=peft_base(), tokens=peft_task(8)[0]),
        "mlsys_lab.peft.models.backward": lambda: (lambda params, trainable, logits, cache: dict(
            params=params, cache=cache, dlogits=np.full(np.shape(logits), 0.01), trainable=trainable))(
            *peft_forward()),
        "mlsys_lab.peft.models.merge_lora": lambda: dict(params=peft_forward()[0]),
        "mlsys_lab.peft.nf4.quantization_rmse": lambda: dict(weights=np.linspace(-1, 1, 128), levels=nf4_levels()),
        "mlsys_lab.peft.qlora.base_weights": lambda: dict(state=qlora_state()[0]),
        **{f"mlsys_lab.peft.qlora.{name}": lambda: dict(zip(("state", "x", "labels"), qlora_state(), strict=True))
           for name in ("qlora_loss", "qlora_loss_and_grads")},
        "mlsys_lab.peft.qlora.qlora_step": lambda: dict(zip(("state", "x", "labels"), qlora_state(), strict=True),
                                                        lr=0.1),
        "mlsys_lab.peft.qlora.train_qlora": lambda: dict(zip(("state", "x", "labels"), qlora_state(), strict=True),
                                                         steps=2, lr=0.1),
        # roofline
        "mlsys_lab.roofline.littles_law.littles_law_sweeps": lambda: dict(roofline_data=records.load("roofline_h200")),
        "mlsys_lab.roofline.littles_law.loaded_latency": lambda: dict(inflight=[8e6, 1e6, 4e6],
                                                                      throughput=[4e12, 1.5e12, 3.8e12]),
        "mlsys_lab.roofline.model.hierarchical_attainable": lambda: dict(
            intensities={"HBM": 10.0, "L2": 2.0}, peak_flops=67e12, bandwidths={"HBM": 4e12, "L2": 10e12}),
        # training memory
        "mlsys_lab.training_memory.accounting.measure_peak_bytes": lambda: dict(fn=lambda: np.ones(1000)),
        "mlsys_lab.training_memory.autodiff.composed_softmax_cross_entropy": lambda: dict(
            logits=tensor(), labels=np.array([0, 1, 2, 3])),
        "mlsys_lab.training_memory.autodiff.softmax_cross_entropy": lambda: dict(
            logits=tensor(), labels=np.array([0, 1, 2, 3])),
        "mlsys_lab.training_memory.autodiff.pick": lambda: dict(a=tensor(), labels=np.array([0, 1, 2, 3])),
        "mlsys_lab.training_memory.diff_modes.central_difference": lambda: dict(f=math.sin, x=1.0, step=1e-3),
        "mlsys_lab.training_memory.diff_modes.forward_difference": lambda: dict(f=math.sin, x=1.0, step=1e-3),
        "mlsys_lab.training_memory.diff_modes.difference_errors": lambda: dict(
            f=math.sin, dfdx=math.cos, x=1.0, steps=np.logspace(-6, -2, 5)),
        "mlsys_lab.training_memory.diff_modes.numerical_gradient": lambda: dict(
            f=lambda v: float(np.sum(v ** 2)), x=np.linspace(-1, 1, 4)),
        "mlsys_lab.training_memory.diff_modes.forward_mode_gradient": lambda: dict(
            f=lambda v: v[0] * v[1] + diff_modes.dual_sin(v[2]), x=[2.0, 3.0, 0.5]),
        "mlsys_lab.training_memory.diff_modes.dag_size": lambda: dict(expr=expr),
        "mlsys_lab.training_memory.diff_modes.tree_size": lambda: dict(expr=expr),
        "mlsys_lab.training_memory.diff_modes.differentiate": lambda: dict(expr=expr),
        "mlsys_lab.training_memory.diff_modes.evaluate_expression": lambda: dict(expr=expr, x=0.5),
        "mlsys_lab.training_memory.hogwild.hogwild_sgd": lambda: dict(
            zip(("indices", "values", "targets"), sparse_regression(64, 32, 4)[:3], strict=True), n_workers=2,
            lr=0.5, n_updates=64),
        "mlsys_lab.training_memory.mixed_precision.accumulate_updates": lambda: dict(weight=1.0, update=1e-4,
                                                                                     n_steps=10, dtype="fp16"),
        "mlsys_lab.training_memory.mixed_precision.scaled_cast_fractions": lambda: dict(
            gradients=np.logspace(-10, -2, 16), scales=[1.0, 2.0 ** 16]),
        "mlsys_lab.training_memory.quantize.quantize_blockwise": lambda: dict(
            weights=np.linspace(-1, 1, 128), levels=nf4_levels(), block_size=64),
        "mlsys_lab.training_memory.quantize.dequantize_blockwise": lambda: (lambda codes, absmax: dict(
            codes=codes, absmax=absmax, levels=nf4_levels()))(*quantize.quantize_blockwise(
                np.linspace(-1, 1, 128), nf4_levels(), 64)),
        "mlsys_lab.training_memory.recompute.forward_backward": lambda: dict(zip(("x", "labels"), spiral(),
                                                                                 strict=True), model=mlp_model()),
        "mlsys_lab.training_memory.recompute.checkpoint_sweep": lambda: dict(
            zip(("x", "labels"), spiral(), strict=True), model=mlp_model(), warmup=0, repeat=1),
        "mlsys_lab.training_memory.recompute.simulate_checkpoint_plan": lambda: dict(
            activation_bytes=np.full(4, 100.0), checkpoint_bytes=np.full(4, 10.0), forward_costs=np.ones(4),
            segment_starts=[0, 2]),
        "mlsys_lab.training_memory.training.forward_logits": lambda: dict(model=mlp_model(),
                                                                          x=autodiff.Tensor(spiral()[0])),
        "mlsys_lab.training_memory.training.forward_loss": lambda: dict(
            model=mlp_model(), x=autodiff.Tensor(spiral()[0]), labels=spiral()[1]),
        "mlsys_lab.training_memory.training.loss_with_parameter": lambda: (lambda m: dict(
            model=m, parameter=m.head[0], value=backend.asnumpy(m.head[0].data), x=spiral()[0], labels=spiral()[1]))(
            mlp_model()),
        "mlsys_lab.training_memory.training.train_mlp_step": lambda: dict(
            zip(("x", "labels"), spiral(), strict=True), model=mlp_model(), optimizer=SGD(0.1)),
        "mlsys_lab.training_memory.training.train_mlp": lambda: dict(
            zip(("x", "labels"), spiral(), strict=True), model=mlp_model(), optimizer=SGD(0.1), batch_size=4,
            n_epochs=1),
        "mlsys_lab.training_memory.weight_compression.decompress": lambda: (lambda a: dict(
            blob=_weight_compression().compress(a, True), dtype=a.dtype, shape=a.shape))(
            np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)),
        "mlsys_lab.training_memory.weight_compression.unshuffle_bytes": lambda: (lambda a: dict(
            data=_weight_compression().shuffle_bytes(a), dtype=a.dtype, shape=a.shape))(
            np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)),
        # kernels: the CPU parts of the kernel packages (the launchers proper need a GPU: EXCLUDED_GPU)
        "mlsys_lab.kernels.launch.pack_arguments": lambda: dict(n_arrays=1, scalars=(np.int32(7), np.float32(1.0))),
        "mlsys_lab.kernels.moe.expert_ffn.expert_slots": lambda: dict(idx=np.array([[0, 1], [1, 2], [2, 0]]),
                                                                      n_experts=3),
        "mlsys_lab.kernels.moe.expert_ffn.grouped_gemm_tiles": lambda: dict(counts=np.array([3, 0, 70]),
                                                                            starts=np.array([0, 3, 3])),
        **{f"mlsys_lab.kernels.moe.expert_ffn.{name}": lambda: _expert_ffn_args()
           for name in ("moe_ffn_loop", "moe_ffn_grouped", "moe_ffn_padded_batched")},
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.check_gemm_shapes": lambda: dict(
            step=next(iter(_bf16().STEPS.values())), m=256, n=256, k=256),
        "mlsys_lab.kernels.memory_hierarchy.constant_memory.poly_reference": lambda: dict(
            x=np.linspace(0, 1, 64, dtype=np.float32),
            coeffs=np.linspace(1.0, 0.1, _constant().N_COEFFS, dtype=np.float32), spread=1,
            threads_per_block=32),
        "mlsys_lab.kernels.memory_hierarchy.sgemm.warptile_problems": lambda: dict(
            values=_sgemm().WARPTILE_CANDIDATES[0]),
        "mlsys_lab.kernels.memory_hierarchy.sgemm.warptile_step": lambda: dict(
            name="warptile", function="sgemm_warptile", idea="toy", values=_sgemm().WARPTILE_CANDIDATES[0]),
        "mlsys_lab.kernels.operators.attention.fused_attention": lambda: dict(
            q=np.ones((2, 4, 8), np.float32), k=np.ones((2, 4, 8), np.float32), v=np.ones((2, 4, 8), np.float32),
            scale=0.35),
    }


def _warp_sim():
    from mlsys_lab.memory_hierarchy import warp_sim
    return warp_sim


def _fsdp():
    from mlsys_lab.parallelism import fsdp
    return fsdp


def _sp():
    from mlsys_lab.parallelism import sp
    return sp


def _weight_compression():
    from mlsys_lab.training_memory import weight_compression
    return weight_compression


def _bf16():
    from mlsys_lab.kernels.memory_hierarchy import bf16_gemm
    return bf16_gemm


def _constant():
    from mlsys_lab.kernels.memory_hierarchy import constant_memory
    return constant_memory


def _sgemm():
    from mlsys_lab.kernels.memory_hierarchy import sgemm
    return sgemm


def _make_data(config):
    from mlsys_lab.fault_tolerance.checkpoint_io import make_data  # a pure function of a module that writes files
    return make_data(config)


def _proxies(*shapes):
    """Proxies of a fresh trace (the inputs of a graph being recorded)."""
    from mlsys_lab.operators.ir import Tracer
    tracer = Tracer()
    return [tracer.add("input", (), shape, "float32", param=f"p{i}") for i, shape in enumerate(shapes)]


def _elementwise_group() -> dict:
    """The arguments fuse_elementwise passes for the one elementwise group of relu(x * 2 + 1) over (4, 8)."""
    from mlsys_lab.operators.functional import relu
    from mlsys_lab.operators.ir import trace
    from mlsys_lab.operators.passes import fusion_groups
    graph = trace(lambda x: relu(x * 2.0 + 1.0), (4, 8))
    group = fusion_groups(graph)[0]
    members = {n.name for n in group}
    consts, inputs = {}, []
    for node in group:
        for name in node.inputs:
            if name in members:
                continue
            if graph.node(name).op == "const":
                consts[name] = graph.node(name).attrs["value"]
            elif name not in inputs:
                inputs.append(name)
    head = group[-1]
    return dict(nodes=group, consts=consts, inputs=tuple(inputs), input_shapes=[graph.node(n).shape for n in inputs],
                outputs=(head.name,), shape=head.shape, target="cpu")


def _noop_kernel(*args) -> None:
    """A warp_sim kernel that issues no request."""


def _reduce_kernel(bx, x, out, shared) -> None:
    """A warp_sim block sum of 32 elements: one warp loads, lane 0 adds and stores."""
    lane = np.arange(32)
    values = x[bx * 32 + lane]
    out[np.array([bx])] = np.array([values.sum()])


def _expert_ffn_args() -> dict:
    """Four tokens of width 8, two experts each of three (FFN width 4), gates summing to one."""
    g = np.random.default_rng(5)
    return dict(x=g.standard_normal((4, 8)).astype(np.float32), idx=np.array([[0, 1], [1, 2], [2, 0], [0, 2]]),
                gate=np.full((4, 2), 0.5, np.float32), w1=g.standard_normal((3, 8, 4)).astype(np.float32) / 3,
                w2=g.standard_normal((3, 4, 8)).astype(np.float32) / 2)


TABLE.update(_object_table())


def _course_schedule():
    """The course's 1F1B schedule function (imported when the baseline is built)."""
    from mlsys_lab.capstone.pipeline import course_one_f_one_b

    return course_one_f_one_b


def _course_ddp_schedule():
    """The course's DDP bucket schedule (imported when the baseline is built)."""
    from mlsys_lab.parallelism.dp import ddp_bucket_schedule

    return ddp_bucket_schedule


def _ring_cost(n_bytes) -> float:
    """An all-reduce cost for the DDP baselines: α = 10 µs, β = 1 ns per byte."""
    return 1e-5 + 1e-9 * float(n_bytes)
