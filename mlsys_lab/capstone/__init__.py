"""The capstone (lesson 12): a small transformer trained on the learner's own pieces, over real MPI ranks.

==========  ==========================================================================================================
text        the bundled text (300 KB of Shakespeare, public domain), characters as tokens, the global batch of a step
model       a decoder-only transformer in NumPy: flat parameters, forward, backward written out; the learner's
            cross-entropy and layer-norm backward come in through ``ModelOps``
train       Adam over the flat parameters, a run's state, the single-process training loop, held-out loss, sampling
gpu_loss    on a CUDA GPU, the loss from the fused kernel of lesson 06 (the learner's or the course's)
dp          real ranks through simulated-network pieces: ``MpiNetwork`` (``exchange`` over MPI), ``MpiGroup``
            (``all_reduce`` by the ring piece), and the course's ``average_gradients``
stack       which pieces run: the learner's where their check passed, else the course's (:mod:`mlsys_lab.pieces`)
checkpoint  θ, Adam's moments and the step in one file, written by the crash-safe writer piece, checked on load
zero        ZeRO-1 over the same ranks: Adam's m and v sharded, a reduce-scatter and an all-gather per step
dp_run      runner under mpiexec: data-parallel training with checkpoints, resume, and a JSON report from rank 0
launch      ``run_data_parallel`` (through :func:`mlsys_lab.mpi.run_mpi`) and ``run_and_kill`` (SIGKILL one rank)
lora        ``Adapters``: A and B of LoRA on named linears, run by the learner's ``lora_forward`` and ``lora_backward``
finetune    a LoRA fine-tune of the trained model on text it never saw: θ frozen, Adam on the adapters, merge, counts
moe         a mixture-of-experts MLP: router, top-k experts within a capacity (the learner's lesson-11 gate), backward
moe_train   training the model with experts, the routing of every step (drops, load), its gradient check
==========  ==========================================================================================================

The main functions are importable from here: ``from mlsys_lab.capstone import train, run_data_parallel``.
"""

from mlsys_lab.capstone.dp import MpiGroup, MpiNetwork, average_gradients, ring_allreduce_on_ranks
from mlsys_lab.capstone.finetune import LoraConfig, lora_finetune, merge_adapters
from mlsys_lab.capstone.launch import run_and_kill, run_data_parallel
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
    "run_and_kill", "run_data_parallel", "sample", "shard_rows", "train", "run_step", "Adapters", "LoraConfig",
    "lora_finetune", "merge_adapters", "MoeConfig", "train_moe_model",
]
