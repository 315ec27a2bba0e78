"""The capstone (lesson 12): a small transformer trained on the learner's own pieces, over real MPI ranks.

================  ====================================================================================================
text              the bundled text (300 KB of Shakespeare, public domain), characters as tokens, the global batch of a
                  step
model             a decoder-only transformer in NumPy: flat parameters, forward, backward written out; the learner's
                  cross-entropy and layer-norm backward come in through ``ModelOps``
operators         the course's versions of the learner's operators: softmax cross-entropy, layer-norm and attention
                  backward
gradient_check    the model's backward against central differences
train             Adam over the flat parameters, a run's state, the single-process training loop, held-out loss,
                  sampling
mixed_precision   the same run with an fp16 gradient, fp32 master weights and the learner's loss scaler
gpu_loss          on a CUDA GPU, the loss from the fused kernel of lesson 06 (the learner's or the course's)
dp                real ranks through simulated-network pieces: ``MpiNetwork`` (``exchange`` over MPI), ``MpiGroup``
                  (``all_reduce`` by the ring piece), and the course's ``average_gradients``
ddp               DDP's gradient buckets on the same ranks: the ``ddp_schedule`` piece plans them, a thread per
                  rank all-reduces each bucket while the backward goes on (``dp_run --ddp-buckets``)
stack             which pieces run: the learner's where their check passed, else the course's
                  (:mod:`mlsys_lab.pieces`)
checkpoint        θ, Adam's moments and the step in one file, written by the crash-safe writer piece, checked on load;
                  under ZeRO-1 a shard per rank and a manifest written last that commits the step
zero              ZeRO-1 over the same ranks: Adam's m and v sharded, a reduce-scatter and an all-gather per step
memory            a rank's bytes from first principles: θ, gradient, Adam's m and v (sharded by ZeRO-1), the
                  activations the backward keeps; set beside what ``dp_run --measure-memory`` measures with
                  tracemalloc
tp                every block's MLP over tensor-parallel ranks (Megatron) by the learner's ``tp_mlp``: 2 all-reduces a
                  step
pipeline          two stages on two ranks (embedding + first blocks | last blocks + head) in the learner's 1F1B order
pp_run            runner under mpiexec: pipeline training, the stash peaks and the op timeline of each rank
dp_run            runner under mpiexec: data-parallel training with checkpoints, resume, and a JSON report from rank 0
launch            ``run_data_parallel``, ``run_pipeline``, ``run_expert_parallel`` and ``run_and_kill`` (SIGKILL one
                  rank), through :func:`mlsys_lab.mpi.run_mpi`
lora              ``Adapters``: A and B of LoRA on named linears, run by the learner's ``lora_forward`` and
                  ``lora_backward``
finetune          a LoRA fine-tune of the trained model on text it never saw: θ frozen, Adam on the adapters, merge,
                  counts
moe               a mixture-of-experts MLP: router, top-k experts within a capacity (the learner's lesson-11 gate),
                  backward; the batch's sequences routed in one or more routing groups
moe_train         training the model with experts, the routing of every step (drops, load), its gradient check
ep                expert parallelism over real MPI ranks: each rank owns E/p experts, every MoE block's rows go to them
                  and back in all-to-alls through the learner's ``ep_dispatch``; its checks of the piece
ep_run            runner under mpiexec: the MoE model trained expert-parallel, bytes and drops per step from rank 0
================  ====================================================================================================

The main functions are importable from here: ``from mlsys_lab.capstone import train, run_data_parallel``.
"""

from mlsys_lab.capstone.dp import MpiGroup, MpiNetwork, average_gradients, ring_allreduce_on_ranks
from mlsys_lab.capstone.finetune import LoraConfig, lora_finetune, merge_adapters
from mlsys_lab.capstone.launch import run_and_kill, run_data_parallel, run_expert_parallel
from mlsys_lab.capstone.lora import Adapters
from mlsys_lab.capstone.model import (
    GPTConfig,
    ModelOps,
    count_params,
    course_ops,
    gpt_forward,
    init_theta,
    loss_and_grad,
)
from mlsys_lab.capstone.moe import MoeConfig
from mlsys_lab.capstone.moe_train import train_moe_model
from mlsys_lab.capstone.stack import PIECES, Stack, load_stack, pieces_rows
from mlsys_lab.capstone.text import corpus, global_batch, shard_rows
from mlsys_lab.capstone.train import (
    RunConfig,
    TrainState,
    adam_update,
    fresh_run,
    held_out_loss,
    run_step,
    sample,
    train,
)

__all__ = [
    "PIECES", "GPTConfig", "ModelOps", "MpiGroup", "MpiNetwork", "Stack", "RunConfig", "TrainState", "adam_update",
    "average_gradients", "corpus", "course_ops", "gpt_forward", "fresh_run", "global_batch", "held_out_loss",
    "init_theta", "load_stack", "loss_and_grad", "count_params", "pieces_rows", "ring_allreduce_on_ranks",
    "run_and_kill", "run_data_parallel", "run_expert_parallel", "sample", "shard_rows", "train", "run_step",
    "Adapters", "LoraConfig", "lora_finetune", "merge_adapters", "MoeConfig", "train_moe_model",
]
