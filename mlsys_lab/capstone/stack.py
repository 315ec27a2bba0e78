"""Which pieces the capstone runs: the learner's, where their check passed, else the course's, and a table of which.

Each piece is looked up by its exercise's name through :func:`mlsys_lab.pieces.piece`, which prints one line per
piece ("ring_allreduce: yours (lesson 07 ...)" or "... the course's (yours is not written yet)"). The MPI ranks
look their pieces up themselves, from the same store (they inherit ``MLSYS_LAB_PIECES``), and rank 0 reports
which ones ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from mlsys_lab import backend, pieces
from mlsys_lab.capstone.dp import average_gradients, ring_allreduce_on_ranks
from mlsys_lab.capstone.gpu_loss import PIECE as GPU_LOSS
from mlsys_lab.capstone.gpu_loss import kernel_cross_entropy
from mlsys_lab.capstone.model import ModelOps
from mlsys_lab.capstone.moe import capacity_routing, gate_combine
from mlsys_lab.capstone.operators import attention_vjp, cross_entropy_with_grad, layer_norm_grad
from mlsys_lab.capstone.pipeline import course_one_f_one_b
from mlsys_lab.capstone.tp import course_tp_mlp
from mlsys_lab.fault_tolerance.checkpoint_io import write_atomic
from mlsys_lab.kernels.training_memory.softmax_xent import softmax_xent_on_gpu
from mlsys_lab.moe.dispatch import expert_dispatch
from mlsys_lab.moe.gating import aux_loss_and_grad
from mlsys_lab.parallelism.dp import ddp_bucket_schedule
from mlsys_lab.peft.qlora import lora_linear, lora_linear_backward
from mlsys_lab.training_memory.mixed_precision import loss_scaler_step

# name, lesson, what it does in the capstone, the course's version
PIECES: tuple[tuple[str, str, str, Callable], ...] = (
    ("softmax_cross_entropy", "06", "the loss and d loss / d logits of every step", cross_entropy_with_grad),
    ("layer_norm_backward", "06", "the backward of the 2L + 1 layer norms", layer_norm_grad),
    ("attention_backward", "12", "the backward of causal attention in every block (this lesson)", attention_vjp),
    ("tp_mlp", "08", "the MLP of every block split over tensor-parallel ranks, one all-reduce forward and one "
                     "backward", course_tp_mlp),
    ("ring_allreduce", "07", "sums the gradient buffer over the MPI ranks", ring_allreduce_on_ranks),
    ("average_gradients", "12", "packs, all-reduces and averages the gradients (this lesson)", average_gradients),
    ("ddp_schedule", "08", "which layers' gradients go in which bucket, and when each bucket's all-reduce starts, "
                           "in the data-parallel run", ddp_bucket_schedule),
    ("one_f_one_b", "08", "the order of forward and backward micro-batches on each stage of the two-stage pipeline",
     course_one_f_one_b),
    ("crash_safe_writer", "09", "writes every checkpoint of the MPI run", write_atomic),
    ("loss_scaler_step", "06", "unscales the float16 gradients, finds inf/NaN and moves the scale in the "
                           "mixed-precision run", loss_scaler_step),
    ("lora_forward", "10", "every adapted linear of the LoRA fine-tune, forward", lora_linear),
    ("lora_backward", "10", "every adapted linear of the LoRA fine-tune, backward: dX, dA, dB", lora_linear_backward),
    ("route_with_capacity", "11", "which experts take each token of the MoE model, within their capacity",
     capacity_routing),
    ("top_k_gate", "11", "the gate weights of the MoE model's experts (its combine tensor)", gate_combine),
    ("aux_loss", "11", "the Switch load-balancing loss of every MoE block and its gradient to the router",
     aux_loss_and_grad),
    ("ep_dispatch", "11", "sends each rank's kept (token, expert) rows to the ranks that own the experts, in one "
                          "all-to-all, in the expert-parallel run (and the output gradients in its backward)",
     expert_dispatch),
)
# What the data-parallel ranks run (and report), the pipeline's and the expert-parallel run's; the other pieces run in
# this process only.
RANK_PIECES = ("softmax_cross_entropy", "layer_norm_backward", "attention_backward", "ring_allreduce",
               "average_gradients", "crash_safe_writer", "ddp_schedule", GPU_LOSS)
PIPELINE_PIECES = ("softmax_cross_entropy", "layer_norm_backward", "attention_backward", "one_f_one_b", GPU_LOSS)
EXPERT_PARALLEL_PIECES = ("softmax_cross_entropy", "layer_norm_backward", "attention_backward", "ring_allreduce",
                          "average_gradients", "route_with_capacity", "top_k_gate", "aux_loss", "ep_dispatch", GPU_LOSS)
# On a CUDA GPU the loss runs on a kernel instead of softmax_cross_entropy (mlsys_lab.capstone.gpu_loss).
GPU_PIECES: tuple[tuple[str, str, str, Callable], ...] = (
    (GPU_LOSS, "06", "the loss and its gradient on a CUDA GPU, in one fused kernel (instead of "
                     "softmax_cross_entropy there)", softmax_xent_on_gpu),
)


@dataclass(frozen=True)
class Stack:
    """The functions a run uses, and whose each one is ("yours" or "the course's")."""

    ops: ModelOps
    ring_allreduce: Callable
    average_gradients: Callable
    write_checkpoint: Callable
    whose: dict
    lora_forward: Callable = lora_linear
    lora_backward: Callable = lora_linear_backward
    # The operators in float64 throughout (the loss from softmax_cross_entropy even on a GPU, whose loss kernel is
    # float32): what a central-difference gradient check needs.
    exact_ops: ModelOps | None = None
    tp_mlp: Callable = course_tp_mlp  # every block's MLP over tensor-parallel ranks (mlsys_lab.capstone.tp)
    ep_dispatch: Callable = expert_dispatch  # the MoE blocks' rows to their experts' ranks (mlsys_lab.capstone.ep)

    @staticmethod
    def course() -> Stack:
        """The course's pieces only (what the tests and the equality checks compare against)."""
        fns = {name: course for name, _, _, course in active_pieces()}
        return Stack(_ops(fns), fns["ring_allreduce"], fns["average_gradients"], fns["crash_safe_writer"],
                     dict.fromkeys(fns, "the course's"), exact_ops=_exact_ops(fns))


def active_pieces() -> tuple[tuple[str, str, str, Callable], ...]:
    """The pieces a run uses here: :data:`PIECES`, and :data:`GPU_PIECES` where a CUDA GPU answers."""
    return PIECES + (GPU_PIECES if backend.on_gpu else ())


def _ops(fns: dict) -> ModelOps:
    loss = kernel_cross_entropy(fns[GPU_LOSS]) if GPU_LOSS in fns else fns["softmax_cross_entropy"]
    return ModelOps(loss, fns["layer_norm_backward"], fns["attention_backward"], fns["route_with_capacity"],
                    fns["top_k_gate"], fns["aux_loss"])


def _exact_ops(fns: dict) -> ModelOps:
    return ModelOps(fns["softmax_cross_entropy"], fns["layer_norm_backward"], fns["attention_backward"],
                    fns["route_with_capacity"], fns["top_k_gate"], fns["aux_loss"])


def load_stack(quiet: bool = False) -> Stack:
    """Yours, else the course's, for every piece; one printed line per piece unless ``quiet``."""
    fns, whose = {}, {}
    for name, _, _, course in active_pieces():
        fns[name] = pieces.piece(name, course=course, quiet=quiet)
        whose[name] = "yours" if fns[name] is not course else "the course's"
    return Stack(_ops(fns), fns["ring_allreduce"], fns["average_gradients"], fns["crash_safe_writer"], whose,
                 fns["lora_forward"], fns["lora_backward"], exact_ops=_exact_ops(fns), tp_mlp=fns["tp_mlp"],
                 ep_dispatch=fns["ep_dispatch"])


def pieces_rows() -> list[dict[str, str]]:
    """One row per piece: its name, the lesson it comes from, what it does here, and whose version runs."""
    rows = []
    for name, lesson, role, _ in PIECES + GPU_PIECES:
        fn, why = pieces.load_piece(name)
        runs = "yours" if fn is not None else f"the course's ({why})"
        if name == GPU_LOSS and not backend.on_gpu:
            runs = "not here: needs a CUDA GPU (softmax_cross_entropy runs instead)"
        elif name == "softmax_cross_entropy" and backend.on_gpu:
            runs = f"not here: {GPU_LOSS} runs on the GPU instead"
        rows.append({"piece": name, "lesson": lesson, "in the capstone": role, "runs": runs})
    return rows
