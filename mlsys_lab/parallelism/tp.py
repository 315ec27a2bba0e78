"""Megatron tensor parallelism (TP): split each layer's matrices over ``t`` ranks.

Shoeybi et al. 2019, "Megatron-LM", §3. For the MLP ``Z = GeLU(X A) B``:

* ``A`` is split by **columns** ``A = [A_1 … A_t]``: rank r computes ``Y_r = GeLU(X A_r)`` alone,
  since GeLU acts elementwise on columns (no communication);
* ``B`` is split by **rows** ``B = [B_1; …; B_t]``: rank r computes a partial ``Y_r B_r`` and
  ``Z = Σ_r Y_r B_r`` needs one all-reduce.

Attention splits the same way by heads: Wq, Wk, Wv by columns (h/t heads per rank), Wo by rows.
The paper's conjugate operators: ``f`` is identity forward and all-reduce backward; ``g`` is
all-reduce forward and identity backward. One block (attention + MLP) has two ``g`` and two ``f``:
**2 all-reduces in forward and 2 in backward** of a (b, s, d) activation, per layer, per micro-batch.
Norm gains are replicated and computed redundantly on every rank.
"""

from __future__ import annotations

from mlsys_lab.backend import xp
from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import (
    _check_blocks,
    attention,
    attention_backward,
    mlp,
    mlp_backward,
    rms_norm,
    rms_norm_backward,
)
from mlsys_lab.validation import check_array, check_divides, check_int, check_sequence, check_type

COLUMN_SPLIT = ("wq", "wk", "wv", "w1")  # split along axis 1 (output features / heads)
ROW_SPLIT = ("wo", "w2")  # split along axis 0 (input features)


def shard_block(p: dict, n_ranks: int, n_heads: int) -> list[dict]:
    """One block's parameters as ``n_ranks`` Megatron shards (column / row / replicated)."""
    check_type("p", p, dict)
    check_int("n_heads", n_heads, low=1)
    check_divides("n_ranks", n_ranks, of_name="n_heads", of_value=n_heads)
    check_divides("n_ranks", n_ranks, of_name="d_ff", of_value=p["w1"].shape[1])
    shards: list[dict] = [{} for _ in range(n_ranks)]
    for name, value in p.items():
        if name in COLUMN_SPLIT:
            parts = comm.partition(value, n_ranks, axis=1)      # (d, f) -> t × (d, f/t)
        elif name in ROW_SPLIT:
            parts = comm.partition(value, n_ranks, axis=0)      # (f, d) -> t × (f/t, d)
        else:
            parts = comm.replicate(value, n_ranks)              # gains: (d,) on every rank
        for r in range(n_ranks):
            shards[r][name] = parts[r]
    return shards


def unshard_grads(shard_grads: list[dict]) -> dict:
    """Reassemble full-shape gradients from per-rank ones (rank 0's copy of replicated ones)."""
    for g in check_sequence("shard_grads", shard_grads, min_size=1):
        check_type("shard_grads", g, dict)
    full = {}
    for name in shard_grads[0]:
        parts = [g[name] for g in shard_grads]
        if name in COLUMN_SPLIT:
            full[name] = xp.concatenate(parts, axis=1)
        elif name in ROW_SPLIT:
            full[name] = xp.concatenate(parts, axis=0)
        else:
            full[name] = parts[0]
    return full


def tp_block_forward(xs: list, shards: list[dict], head_dim: int, log: comm.CommLog | None = None):
    """One block on ``t`` ranks. xs: t × (b, s, d), identical on every rank. Returns (outs, caches)."""
    check_int("head_dim", head_dim, low=1)
    _check_blocks("shards", shards)
    for x in check_sequence("xs", xs, min_size=len(shards), max_size=len(shards)):
        check_array("xs", x, ndim=3, kinds="f")
    t = len(shards)
    n1 = [rms_norm(xs[r], shards[r]["g1"]) for r in range(t)]                 # replicated (b, s, d)
    # f: identity forward. Each rank runs its heads; g: all-reduce the partial outputs.
    att = [attention(n1[r][0], shards[r]["wq"], shards[r]["wk"], shards[r]["wv"], shards[r]["wo"], head_dim)
           for r in range(t)]
    a = comm.all_reduce([out for out, _ in att], log)                         # t × (b, s, d)
    hs = [xs[r] + a[r] for r in range(t)]
    n2 = [rms_norm(hs[r], shards[r]["g2"]) for r in range(t)]
    mlps = [mlp(n2[r][0], shards[r]["w1"], shards[r]["w2"]) for r in range(t)]  # Y_r B_r partials
    m = comm.all_reduce([out for out, _ in mlps], log)                        # g
    outs = [hs[r] + m[r] for r in range(t)]
    caches = [(n1[r][1], att[r][1], n2[r][1], mlps[r][1]) for r in range(t)]
    return outs, caches


def tp_block_backward(douts: list, caches: list, log: comm.CommLog | None = None):
    """Backward of :func:`tp_block_forward`. douts: t × (b, s, d). Returns (dxs, shard grads)."""
    caches = check_sequence("caches", caches, min_size=1)
    for cache in caches:
        if not isinstance(cache, tuple) or len(cache) != 4:
            raise TypeError(f"caches must hold one 4-tuple per rank (the forward's); got {type(cache).__name__}")
    check_sequence("douts", douts, min_size=len(caches), max_size=len(caches))
    t = len(caches)
    # g backward = identity: every rank feeds the same dout into its MLP shard.
    mb = [mlp_backward(douts[r], caches[r][3]) for r in range(t)]
    du2 = comm.all_reduce([du for du, _ in mb], log)                          # f backward
    n2b = [rms_norm_backward(du2[r], caches[r][2]) for r in range(t)]
    dhs = [douts[r] + n2b[r][0] for r in range(t)]
    ab = [attention_backward(dhs[r], caches[r][1]) for r in range(t)]
    du1 = comm.all_reduce([du for du, _ in ab], log)                          # f backward
    n1b = [rms_norm_backward(du1[r], caches[r][0]) for r in range(t)]
    dxs = [dhs[r] + n1b[r][0] for r in range(t)]
    grads = [{"g1": n1b[r][1], "g2": n2b[r][1], **ab[r][1], **mb[r][1]} for r in range(t)]
    return dxs, grads


def tp_loss_and_grads(x, target, blocks: list[dict], n_heads: int, n_ranks: int,
                      log: comm.CommLog | None = None):
    """A full TP training step's loss and (reassembled, full-shape) gradients."""
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    _check_blocks("blocks", blocks)
    check_divides("n_heads", n_heads, of_name="d_model", of_value=x.shape[-1])
    check_int("n_ranks", n_ranks, low=1)
    head_dim = x.shape[-1] // n_heads
    sharded = [shard_block(p, n_ranks, n_heads) for p in blocks]
    xs, caches = comm.replicate(x, n_ranks), []
    for shards in sharded:
        xs, cache = tp_block_forward(xs, shards, head_dim, log)
        caches.append(cache)
    loss, dy = mse_loss(xs[0], target)
    dys, grads = comm.replicate(dy, n_ranks), []
    for cache in reversed(caches):
        dys, g = tp_block_backward(dys, cache, log)
        grads.append(unshard_grads(g))
    return loss, grads[::-1]


def time_mlp_shards(n_tokens: int, hidden: int, degrees=(1, 2, 4, 8), dtype: str = "float32",
                    repeat: int = 10, cpu_threads: int | None = None) -> dict:
    """Timing (seconds) of one rank's MLP GEMMs, (n, h)·(h, 4h/t) then (n, 4h/t)·(4h/t, h), per degree t.

    The FLOPs fall as 1/t (16·n·h²/t); the measured time falls less once the shards get too thin
    to keep the machine busy, which is one reason TP degrees stay small. On NumPy, ``cpu_threads``
    runs the timing in a child process whose BLAS uses that many threads (a CPU core standing in
    for one device; multi-threaded BLAS on a busy shared CPU makes small GEMMs erratic).
    """
    import numpy as np

    from mlsys_lab.backend import on_gpu
    from mlsys_lab.timing import Timing, benchmark

    check_int("repeat", repeat, low=1, high=1000)
    check_int("n_tokens", n_tokens, low=1, high=2**16)
    check_int("hidden", hidden, low=1, high=2**14)  # the (h, 4h) weight: 1 GiB of float32 at 2**14
    if not isinstance(degrees, (tuple, list)) or not degrees:
        raise TypeError(f"degrees must be a non-empty tuple of tensor-parallel degrees; got {degrees!r:.40}")
    for t in degrees:
        try:
            check_divides("t", t, of_name="4·hidden", of_value=4 * hidden)
        except ValueError as error:
            raise ValueError(f"{error} (t: an entry of degrees)") from None
    if not isinstance(dtype, str) or dtype not in ("float16", "float32", "float64"):
        raise ValueError(f"dtype must be one of 'float16', 'float32', 'float64'; got {dtype!r:.40}")
    if cpu_threads is not None and not on_gpu:
        import json
        import os
        import subprocess
        import sys

        n = str(check_int("cpu_threads", cpu_threads, low=1, high=1024))
        env = {**os.environ, "OPENBLAS_NUM_THREADS": n, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
               "MLSYS_LAB_BACKEND": "numpy"}
        code = ("import json; from mlsys_lab.parallelism.tp import time_mlp_shards as f; "
                f"print(json.dumps({{t: s.samples for t, s in f({n_tokens}, {hidden}, {tuple(degrees)}, "
                f"{dtype!r}, {repeat}).items()}}))")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                              check=True)
        return {int(t): Timing(tuple(s), "cpu") for t, s in json.loads(done.stdout).items()}

    n_tokens, hidden = check_int("n_tokens", n_tokens, low=1), check_int("hidden", hidden, low=1)
    g = np.random.default_rng(0)

    def rand(*shape):
        return xp.asarray(g.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)

    x = rand(n_tokens, hidden)                                                 # (n, h) replicated input
    seconds = {}
    for t in degrees:
        check_divides("t", t, of_name="4·hidden", of_value=4 * hidden)
        a, b = rand(hidden, 4 * hidden // t), rand(4 * hidden // t, hidden)    # (h, 4h/t), (4h/t, h) shards
        y, z = xp.empty((n_tokens, 4 * hidden // t), dtype=dtype), xp.empty_like(x)  # (n, 4h/t), (n, h)

        def step(a=a, b=b, y=y, z=z):  # outputs preallocated: time the GEMMs, not the allocator
            xp.matmul(x, a, out=y)
            xp.matmul(y, b, out=z)

        seconds[int(t)] = benchmark(step, warmup=5, repeat=repeat)
    return seconds


def shard_gemm_intensity(n_tokens: int, hidden: int, t: int, bytes_per_value: int = 2) -> float:
    """FLOP per byte of one rank's first MLP GEMM (n, h)·(h, 4h/t): 2·n·h·4h/t over reading X and A
    and writing Y once, bytes_per_value·(n·h + 4h²/t + 4n·h/t)."""
    n, h = check_int("n_tokens", n_tokens, low=1), check_int("hidden", hidden, low=1)
    t = check_int("t", t, low=1)
    check_int("bytes_per_value", bytes_per_value, low=1, high=16)
    return 2 * n * h * 4 * h / t / (bytes_per_value * (n * h + 4 * h * h / t + 4 * n * h / t))
