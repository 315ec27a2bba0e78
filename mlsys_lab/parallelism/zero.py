"""ZeRO / FSDP: partition optimizer states, gradients and parameters over the data-parallel ranks.

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", §5.
Mixed-precision Adam keeps per parameter 2 bytes of fp16 weights, 2 of fp16 gradients and K = 12
of optimizer state (fp32 master weight, momentum, variance). With Ψ parameters on N_d ranks the
model states per GPU are:

    stage 0 (DDP)         (2 + 2 + K)·Ψ                      = 16Ψ
    stage 1 (P_os)        2Ψ + 2Ψ + K·Ψ/N_d                  → 4Ψ as N_d → ∞  (4× less)
    stage 2 (P_os+g)      2Ψ + (2 + K)·Ψ/N_d                 → 2Ψ             (8× less)
    stage 3 (P_os+g+p)    (2 + 2 + K)·Ψ/N_d                                    (N_d× less)

Communication per step and rank (paper §7): DDP's all-reduce = reduce-scatter + all-gather = 2Ψ;
stages 1 and 2 do exactly that (reduce-scatter gradients, all-gather updated weights) = 2Ψ;
stage 3 all-gathers weights in forward *and* backward and reduce-scatters gradients = 3Ψ, 1.5×.
PyTorch FSDP (Zhao et al. 2023) is stage 3; ZeRO-Offload (Ren et al. 2021) moves optimizer states
(and the Adam step) to CPU memory, ZeRO-Infinity the parameters too.

:func:`zero_adam_step` runs stages 0–3 on simulated ranks and counts what each rank holds and sends.
"""

from __future__ import annotations

import math

from mlsys_lab.backend import xp
from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import _check_blocks, block_backward, block_forward, loss_and_grads
from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_number,
    check_type,
)

STAGES = (0, 1, 2, 3)


def zero_memory_breakdown(n_params: float, n_gpus: int, stage: int, bytes_per_param: float = 2,
                          optimizer_bytes_per_param: float = 12, offload_optimizer: bool = False,
                          offload_params: bool = False) -> dict[str, float]:
    """Bytes per GPU of parameters, gradients and optimizer states, and what went to CPU memory.

    ``bytes_per_param`` is used for both weights and gradients (2 for fp16/bf16);
    ``optimizer_bytes_per_param`` is the paper's K. Offloading moves a term to ``cpu_bytes``;
    parameters can be offloaded only at stage 3 (ZeRO-Infinity / FSDP ``CPUOffload``).
    """
    psi = check_finite("n_params", n_params, low=1.0)
    n = check_int("n_gpus", n_gpus, low=1)
    check_choice("stage", stage, STAGES)
    b = check_finite("bytes_per_param", bytes_per_param, low=0.0, low_inclusive=False)
    k = check_finite("optimizer_bytes_per_param", optimizer_bytes_per_param, low=0.0)
    check_bool("offload_optimizer", offload_optimizer)
    check_bool("offload_params", offload_params)
    if offload_params and stage != 3:
        raise ValueError("offload_params needs stage=3 (parameters must be partitioned to stream them); "
                         f"got {stage}")
    params = b * psi / (n if stage >= 3 else 1)
    grads = b * psi / (n if stage >= 2 else 1)
    optimizer = k * psi / (n if stage >= 1 else 1)
    cpu = 0.0
    if offload_optimizer:
        cpu, optimizer = cpu + optimizer, 0.0
    if offload_params:
        cpu, params = cpu + params, 0.0
    return {"params": params, "grads": grads, "optimizer": optimizer, "cpu_bytes": cpu}


def zero_memory_per_gpu(n_params: float, n_gpus: int, stage: int, bytes_per_param: float = 2,
                        optimizer_bytes_per_param: float = 12) -> float:
    """Model-state bytes per GPU at ZeRO ``stage`` (0 = plain DDP), from the paper's formulas above.

    >>> round(zero_memory_per_gpu(7.5e9, 64, 1) / 1e9, 1)   # ZeRO paper, Figure 1: 31.4 GB
    31.4
    """
    parts = zero_memory_breakdown(n_params, n_gpus, stage, bytes_per_param, optimizer_bytes_per_param)
    return parts["params"] + parts["grads"] + parts["optimizer"]


def zero_communication_bytes(n_params: float, n_gpus: int, stage: int, bytes_per_param: float = 2,
                             ring: bool = True) -> float:
    """Bytes one rank sends per step: 2Ψ for stages 0–2, 3Ψ for stage 3 (× (N−1)/N with a ring).

    ``ring=False`` gives the paper's round figures (2Ψ, 3Ψ) that drop the (N−1)/N factor.
    """
    psi = check_finite("n_params", n_params, low=1.0)
    n = check_int("n_gpus", n_gpus, low=1)
    check_choice("stage", stage, STAGES)
    check_bool("ring", ring)
    bytes_per_param = check_finite("bytes_per_param", bytes_per_param, low=0.0, low_inclusive=False)
    factor = (n - 1) / n if ring else 1.0
    return (3 if stage == 3 else 2) * psi * bytes_per_param * factor


def offload_transfer_bytes(n_params: float, n_gpus: int = 1, bytes_per_param: float = 2) -> float:
    """Bytes one GPU moves over PCIe per step when the optimizer runs on the CPU (ZeRO-Offload, Ren et al.
    2021, §4): its share of the fp16 gradients down and of the updated fp16 parameters back up, 4Ψ / N in
    all ("a total communication volume of 4M" for one GPU, M the parameter count)."""
    psi = check_finite("n_params", n_params, low=1.0)
    n = check_int("n_gpus", n_gpus, low=1)
    bytes_per_param = check_finite("bytes_per_param", bytes_per_param, low=0.0, low_inclusive=False)
    return 2 * psi * bytes_per_param / n


def offload_step_overhead(n_params: float, n_gpus: int, tokens_per_gpu: int, pcie_bytes_per_s: float,
                          peak_flop_per_s: float, mfu: float = 0.4) -> dict[str, float]:
    """PCIe time of :func:`offload_transfer_bytes` beside the GPU's compute time for the step
    (6Ψ FLOP per token at ``mfu`` of ``peak_flop_per_s``). If the transfer is not overlapped with the
    backward pass, it adds ``transfer_s`` to every step."""
    check_finite("n_params", n_params, low=1.0)
    check_int("tokens_per_gpu", tokens_per_gpu, low=1)
    check_finite("pcie_bytes_per_s", pcie_bytes_per_s, low=0, low_inclusive=False)
    check_finite("peak_flop_per_s", peak_flop_per_s, low=0, low_inclusive=False)
    check_number("mfu", mfu, low=0, high=1, low_inclusive=False)
    transfer = offload_transfer_bytes(n_params, n_gpus) / pcie_bytes_per_s
    compute = 6 * n_params * tokens_per_gpu / (peak_flop_per_s * mfu)
    return {"transfer_s": transfer, "compute_s": compute, "ratio": transfer / compute}


# --- a real ZeRO step on simulated ranks ------------------------------------------------------
def _flat(block: dict):
    return xp.concatenate([block[k].ravel() for k in sorted(block)])


def _unflat(vector, like: dict) -> dict:
    out, i = {}, 0
    for k in sorted(like):
        n = like[k].size
        out[k] = vector[i:i + n].reshape(like[k].shape)
        i += n
    return out


def _pad(vector, n: int):
    extra = (-vector.size) % n
    return xp.concatenate([vector, xp.zeros(extra)]) if extra else vector


def init_adam_state(blocks: list[dict]) -> dict:
    """Adam moments (zeros) for every block's flat parameter vector, and the step count."""
    _check_blocks("blocks", blocks)
    sizes = [_flat(b).size for b in blocks]
    return {"m": [xp.zeros(n) for n in sizes], "v": [xp.zeros(n) for n in sizes], "t": 0}


def adam(theta, grad, m, v, t: int, lr: float, beta1=0.9, beta2=0.999, eps=1e-8):
    """Kingma & Ba 2015. Elementwise, so a shard of θ is updated from the same shard of g, m, v."""
    t = check_int("t", t, low=1)
    lr = check_finite("lr", lr, low=0.0)
    check_number("beta1", beta1, low=0.0, high=1.0, high_inclusive=False)
    check_number("beta2", beta2, low=0.0, high=1.0, high_inclusive=False)
    eps = check_finite("eps", eps, low=0.0, low_inclusive=False)
    shape = check_array("theta", theta, min_size=0).shape
    for label, array in (("grad", grad), ("m", m), ("v", v)):
        if (got := check_array(label, array, min_size=0).shape) != shape:
            raise ValueError(f"{label} must have the shape of theta {tuple(shape)}; got {tuple(got)}")
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return theta - lr * m_hat / (xp.sqrt(v_hat) + eps), m, v


def reference_adam_step(x, target, blocks, head_dim, state, lr):
    """Single device: full gradient, full Adam. Returns (loss, new blocks, new state)."""
    check_type("state", state, dict)
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    loss, grads = loss_and_grads(x, target, blocks, head_dim)
    t = state["t"] + 1
    new_blocks, ms, vs = [], [], []
    for blk, g, m, v in zip(blocks, grads, state["m"], state["v"], strict=True):
        theta, m, v = adam(_flat(blk), _flat(g), m, v, t, lr)
        new_blocks.append(_unflat(theta, blk))
        ms.append(m)
        vs.append(v)
    return loss, new_blocks, {"m": ms, "v": vs, "t": t}


def zero_adam_step(x, target, blocks: list[dict], head_dim: int, n_ranks: int, stage: int, lr: float = 1e-3,
                   state: dict | None = None, log: comm.CommLog | None = None):
    """One data-parallel Adam step at ZeRO ``stage`` over ``n_ranks`` simulated ranks.

    Each block's parameters are one flat vector of Ψ_i elements, padded to a multiple of N and cut
    into N shards. Rank r owns shard r of the Adam moments (stages ≥ 1), of the gradient (≥ 2) and
    of the weights (3). Stage 3 *loads* a block's weights with an all-gather just before using it
    and *unloads* them after; in backward it re-gathers them and recomputes the block's forward
    from its stored input (activation checkpointing), then reduce-scatters the gradient.

    Returns (loss, new blocks as full dicts, new state, peak elements held per rank by kind).
    ``state`` holds full-length moments (shard r is what rank r would keep).
    """
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    if state is not None:
        check_type("state", state, dict)
    n = check_int("n_ranks", n_ranks, low=1)
    check_choice("stage", stage, STAGES)
    if x.shape[0] % n:
        raise ValueError(f"n_ranks must divide the batch size {x.shape[0]}; got {n}")
    state = state or init_adam_state(blocks)
    # Stage 0 is DDP: its all-reduce is written as reduce-scatter + all-gather (the same bytes), and
    # every rank would update all of θ; here each updates a shard, which gives the same numbers.
    t = state["t"] + 1
    flats = [_pad(_flat(b), n) for b in blocks]                         # L × (Ψ_i + pad,)
    shards = [comm.partition(f, n) for f in flats]                       # L × N × (Ψ_i/N,)
    xs, ts = comm.partition(x, n), comm.partition(target, n)
    held = {"params": 0, "grads": 0, "optimizer": 0}
    total = sum(f.size for f in flats)
    held["optimizer"] = 2 * (total // n if stage >= 1 else total)       # Adam m and v
    resident_params = total // n if stage == 3 else total

    def weights(i):  # the full weights of block i as rank-local dicts (stage 3: gathered now)
        if stage == 3:
            return comm.all_gather(shards[i], log=log)
        return [flats[i]] * n

    # forward: stash each block's input per rank; stage 3 holds one gathered block at a time
    acts = [[None] * len(blocks) for _ in range(n)]
    hs = list(xs)
    for i, blk in enumerate(blocks):
        full = weights(i)
        for r in range(n):
            acts[r][i] = hs[r]
            hs[r], _ = block_forward(hs[r], _unflat(full[r][:_flat(blk).size], blk), head_dim)
        gathered = flats[i].size - flats[i].size // n if stage == 3 else 0   # the block, beyond the own shard
        held["params"] = max(held["params"], resident_params + gathered)
    losses_dys = [mse_loss(hs[r], ts[r]) for r in range(n)]
    dys = [dy for _, dy in losses_dys]
    grad_shards, live_grads = [None] * len(blocks), 0
    for i in reversed(range(len(blocks))):
        blk = blocks[i]
        full = weights(i)
        local = []
        for r in range(n):
            _, cache = block_forward(acts[r][i], _unflat(full[r][:_flat(blk).size], blk), head_dim)
            dys[r], g = block_backward(dys[r], cache)
            local.append(_pad(_flat(g), n) / n)                            # mean over ranks
        live_grads += flats[i].size                                        # this block's full grad
        held["grads"] = max(held["grads"], live_grads)
        grad_shards[i] = comm.reduce_scatter(local, log=log)              # N × (Ψ_i/N,)
        if stage >= 2:
            live_grads -= flats[i].size - flats[i].size // n               # keep only the own shard
    new_blocks, ms, vs = [], [], []
    for i, blk in enumerate(blocks):
        size = _flat(blk).size
        m_full, v_full = _pad(state["m"][i], n), _pad(state["v"][i], n)
        new = []
        moments = zip(comm.partition(m_full, n), comm.partition(v_full, n), strict=True)
        for r, (m_r, v_r) in enumerate(moments):
            theta, m_r, v_r = adam(shards[i][r], grad_shards[i][r], m_r, v_r, t, lr)
            new.append((theta, m_r, v_r))
        thetas = [th for th, _, _ in new]
        full = thetas if stage == 3 else comm.all_gather(thetas, log=log)  # stage 3 keeps only shards
        vector = xp.concatenate(thetas) if stage == 3 else full[0]
        new_blocks.append(_unflat(vector[:size], blk))
        ms.append(xp.concatenate([mv[1] for mv in new])[:size])
        vs.append(xp.concatenate([mv[2] for mv in new])[:size])
    held["params"] = max(held["params"], resident_params)
    loss = sum(lo for lo, _ in losses_dys) / n
    return loss, new_blocks, {"m": ms, "v": vs, "t": t}, held


def zero_savings(n_gpus: int, stage: int) -> float:
    """Memory reduction vs DDP for mixed-precision Adam (K = 12): 16Ψ / stage bytes; Ψ cancels."""
    return zero_memory_per_gpu(1e9, n_gpus, 0) / zero_memory_per_gpu(1e9, n_gpus, stage)


def asymptotic_savings(stage: int) -> float:
    """Limit of :func:`zero_savings` as N_d → ∞: 1, 4, 8, ∞."""
    check_choice("stage", stage, STAGES)
    return {0: 1.0, 1: 16 / 4, 2: 16 / 2, 3: math.inf}[stage]
