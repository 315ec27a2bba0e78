"""Real multi-process training: the DP and TP steps of this package across MPI processes.

Run by :func:`run_mpi_training`, which starts ``mpiexec -n P python -m mlsys_lab.parallelism.mpi_run MODE STEPS``
through the course's one MPI launcher, :func:`mlsys_lab.mpi.run_mpi`.
Every process builds the same model and data from fixed seeds, then trains with SGD:

* ``dp``: process r takes batch slice r; gradients are summed with ``MPI.Allreduce`` and divided by P;
* ``tp``: process r holds Megatron shard r of every block (:func:`~mlsys_lab.parallelism.tp.shard_block`)
  and runs the block's local maths with an ``Allreduce`` at each ``g`` (forward) and ``f`` (backward).

Rank 0 prints the loss of every step and the seconds per step as one JSON line. The single-process curve
(:func:`train_reference`, on whichever backend the caller uses) must agree to float64 rounding.
The workers always run on NumPy: they exchange host buffers (this MPI is not CUDA-aware).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from mlsys_lab.backend import xp
from mlsys_lab.mpi import MpiUnavailable, run_mpi
from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism.model import (
    BlockConfig,
    attention,
    attention_backward,
    init_model,
    loss_and_grads,
    mlp,
    mlp_backward,
    rms_norm,
    rms_norm_backward,
    sgd_update,
)
from mlsys_lab.parallelism.tp import shard_block
from mlsys_lab.validation import check_choice, check_int

CONFIG = BlockConfig(d_model=32, n_heads=4, d_ff=128)
N_LAYERS, BATCH, SEQ, LR = 2, 8, 16, 0.5


def make_training_problem(seed: int = 0):
    """Model, inputs and targets (a fixed random regression task), identical in every process."""
    g = np.random.default_rng(seed)
    x = g.normal(size=(BATCH, SEQ, CONFIG.d_model))
    target = np.tanh(x @ g.normal(0, 0.3, size=(CONFIG.d_model, CONFIG.d_model)))
    return init_model(CONFIG, N_LAYERS, seed), xp.asarray(x), xp.asarray(target)


def train_reference(n_steps: int) -> list[float]:
    """Single-process SGD: the curve every parallel run must reproduce."""
    blocks, x, target = make_training_problem()
    losses = []
    for _ in range(n_steps):
        loss, grads = loss_and_grads(x, target, blocks, CONFIG.head_dim)
        blocks = sgd_update(blocks, grads, LR)
        losses.append(loss)
    return losses


def _tp_step(blocks_local, x, target, all_reduce):
    """Forward and backward of one TP rank; ``all_reduce`` sums an array over the processes."""
    hd = CONFIG.head_dim
    caches, h = [], x
    for p in blocks_local:
        u1, c1 = rms_norm(h, p["g1"])
        a, ca = attention(u1, p["wq"], p["wk"], p["wv"], p["wo"], hd)
        hh = h + all_reduce(a)                                        # g
        u2, c2 = rms_norm(hh, p["g2"])
        m, cm = mlp(u2, p["w1"], p["w2"])
        h = hh + all_reduce(m)                                        # g
        caches.append((c1, ca, c2, cm))
    loss, dy = mse_loss(h, target)
    grads = []
    for c1, ca, c2, cm in reversed(caches):
        du2, gm = mlp_backward(dy, cm)
        dh_norm, dg2 = rms_norm_backward(all_reduce(du2), c2)         # f backward
        dh = dy + dh_norm
        du1, gatt = attention_backward(dh, ca)
        dx_norm, dg1 = rms_norm_backward(all_reduce(du1), c1)         # f backward
        dy = dh + dx_norm
        grads.append({"g1": dg1, "g2": dg2, **gatt, **gm})
    return loss, grads[::-1]


def worker(mode: str, n_steps: int) -> None:
    """The body each MPI process runs; rank 0 prints the run as one JSON line (read by ``run_mpi``)."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()

    def all_reduce(array):
        result = np.empty_like(array)
        world.Allreduce(np.ascontiguousarray(array), result, op=MPI.SUM)
        return result

    blocks, x, target = make_training_problem()
    if mode == "tp":
        blocks = [shard_block(p, size, CONFIG.n_heads)[rank] for p in blocks]
    else:
        x, target = np.split(x, size)[rank], np.split(target, size)[rank]
    losses, seconds = [], []
    for _ in range(n_steps):
        world.Barrier()
        start = time.perf_counter()
        if mode == "tp":
            loss, grads = _tp_step(blocks, x, target, all_reduce)
        else:
            loss, grads = loss_and_grads(x, target, blocks, CONFIG.head_dim)
            grads = [{k: all_reduce(v) / size for k, v in g.items()} for g in grads]
            loss = float(all_reduce(np.array([loss]))[0] / size)
        blocks = sgd_update(blocks, grads, LR)
        seconds.append(time.perf_counter() - start)
        losses.append(loss)
    if rank == 0:
        print(json.dumps({"mode": mode, "n_ranks": size, "n_procs": size, "losses": losses,
                          "seconds_per_step": seconds}))


def main(argv: list[str] | None = None) -> None:
    """One MPI process of a DP or TP run (``python -m mlsys_lab.parallelism.mpi_run dp 20``)."""
    parser = argparse.ArgumentParser(description="one MPI process of a DP or TP training run")
    parser.add_argument("mode", choices=["dp", "tp"])
    parser.add_argument("n_steps", type=int)
    args = parser.parse_args(argv)
    worker(args.mode, args.n_steps)


def run_mpi_training(mode: str, n_procs: int = 2, n_steps: int = 20, timeout_s: float = 120) -> dict:
    """Launch ``n_procs`` MPI processes (:func:`mlsys_lab.mpi.run_mpi`); returns rank 0's JSON.

    The result holds the losses, the seconds per step and ``engine``. Without a working MPI it says
    why and falls back to one process (``engine`` says which ran).
    """
    check_choice("mode", mode, ("dp", "tp"))
    n_procs = check_int("n_procs", n_procs, low=1, high=8)
    n_steps = check_int("n_steps", n_steps, low=1)
    try:
        # The workers exchange host (NumPy) buffers: this MPI is not CUDA-aware.
        result = run_mpi("mlsys_lab.parallelism.mpi_run", n_procs, [mode, str(n_steps)], timeout_s,
                         env={"MLSYS_LAB_BACKEND": "numpy"})
        result["engine"] = f"MPI, {n_procs} processes"
        return result
    except (MpiUnavailable, RuntimeError) as exc:
        problem = str(exc).strip()[-300:]
    print(f"MPI unavailable ({problem}); falling back to a single process.")
    start = time.perf_counter()
    losses = train_reference(n_steps)
    return {"mode": mode, "n_procs": 1, "losses": losses, "engine": "single process (fallback)",
            "seconds_per_step": [(time.perf_counter() - start) / n_steps] * n_steps}


if __name__ == "__main__":
    main()
