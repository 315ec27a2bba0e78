"""The course's fused softmax cross-entropy kernel (``softmax_xent.cu``), its NumPy reference and its byte counts.

For T tokens over a vocabulary of V classes, logits z (T, V) float32 and labels y (T,) int32:

    loss[t]       = logsumexp(z_t) − z_t[y_t]              (nats, one per token)
    dlogits[t, j] = softmax(z_t)_j − [j = y_t]              (∂ Σ_t loss[t] / ∂z[t, j]: the gradient of the sum)

forward and backward in one kernel, one block per row: pass 1 is the online softmax of Milakov & Gimelshein
(2018, "Online normalizer calculation for softmax": a running max and a running sum rescaled when the max grows),
pass 2 writes the gradient. The softmax itself is never stored. The launcher takes and returns device arrays and
raises :class:`~mlsys_lab.kernels.loader.GPUUnavailable` on a CPU.

=====================  ==================================================================================
variant                what it is
=====================  ==================================================================================
``fused``              the course's kernel: float4 loads when V % 4 == 0, else one float a thread per step
``runtime_stride``     correct but slower: loops that step by blockDim.x and the accurate expf (one load in flight)
``three_pass``         correct but slower: the max, the sum and the write each read the row
``thread_per_row``     correct but far slower: one thread walks a whole row (uncoalesced, too few threads)
=====================  ==================================================================================
"""

from __future__ import annotations

import functools

import numpy as np

from mlsys_lab import backend
from mlsys_lab.kernels import loader
from mlsys_lab.validation import check_array, check_choice, check_int

SOURCE = "training_memory/softmax_xent.cu"
VARIANTS = ("fused", "runtime_stride", "three_pass", "thread_per_row")
MAX_THREADS = 1024
ROW_THREADS = 128  # the block of the one-thread-per-row variant


def threads_for(vocab: int) -> int:
    """Threads of the block that handles one row: about V / 16, a power of two in [32, 1024].

    Measured on the H200 (two passes over T × V float32): at V = 8192, 512 threads ran at 94% of copy bandwidth
    (1024: 79%); at V = 32768, 1024 threads at 93% (512: 74%, 256: 64%). Fewer, larger blocks keep fewer rows
    resident, so that the rows read in pass 1 are still in L2 when pass 2 reads them again."""
    check_int("vocab", vocab, low=1)
    target = max(vocab // 16, 1)
    return int(min(MAX_THREADS, max(32, 1 << (target.bit_length() - 1))))


def _check(logits, labels) -> None:
    check_array("logits", logits, ndim=2, kinds="f", min_size=0)
    if logits.dtype != np.float32:
        raise TypeError(f"logits must be float32; got {logits.dtype}")
    if logits.shape[1] < 1:
        raise ValueError(f"logits must have at least one class (column); got shape {tuple(logits.shape)}")
    check_array("labels", labels, ndim=1, kinds="iu", min_size=0, shape=(logits.shape[0],))


@functools.lru_cache(maxsize=64)
def _kernel(name: str, threads: int):
    return loader.kernel(SOURCE, name, {"XENT_THREADS": threads})


def softmax_xent_on_gpu(logits, labels, variant: str = "fused"):
    """(loss (T,), dlogits (T, V)) of the fused softmax cross-entropy on the GPU; logits (T, V) float32, labels
    (T,) int32 in [0, V) (a label outside gives a NaN loss), both device arrays. ``variant``: :data:`VARIANTS`."""
    loader.require_gpu("softmax_xent_on_gpu")
    xp = backend.xp
    check_choice("variant", variant, VARIANTS)
    _check(logits, labels)
    logits = xp.ascontiguousarray(logits)
    labels = xp.ascontiguousarray(labels, dtype=xp.int32)
    n_tokens, vocab = logits.shape
    loss = xp.empty(n_tokens, dtype=xp.float32)
    dlogits = xp.empty_like(logits)
    if n_tokens == 0:
        return loss, dlogits
    if variant == "thread_per_row":
        kernel = _kernel("softmax_xent_thread_per_row", ROW_THREADS)
        kernel((loader.blocks_for(n_tokens, ROW_THREADS),), (ROW_THREADS,),
               (logits, labels, loss, dlogits, np.int32(n_tokens), np.int32(vocab)))
        return loss, dlogits
    threads = threads_for(vocab)
    name = {"three_pass": "softmax_xent_three_pass", "runtime_stride": "softmax_xent_runtime_stride"}.get(
        variant, "softmax_xent_vec4" if vocab % 4 == 0 else "softmax_xent_scalar")
    _kernel(name, threads)((n_tokens,), (threads,), (logits, labels, loss, dlogits, np.int32(vocab)))
    return loss, dlogits


def softmax_xent_reference(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy float64 reference: (loss (T,), dlogits (T, V)) with loss = (m − z_y) + log Σ exp(z − m), m the row's
    max, and dlogits = softmax(z) − onehot(y), the gradient of Σ_t loss[t]."""
    z = np.asarray(check_array("logits", logits, ndim=2, kinds="fiu", finite=True, min_size=0), dtype=np.float64)
    if z.shape[1] < 1:
        raise ValueError(f"logits must have at least one class (column); got shape {z.shape}")
    y = check_array("labels", labels, ndim=1, kinds="iu", min_size=0, shape=(z.shape[0],)).astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= z.shape[1]):
        raise ValueError(f"labels must be in [0, {z.shape[1] - 1}] (a class of the vocabulary); got "
                         f"{int(y.min())} to {int(y.max())}")
    rows = np.arange(z.shape[0])
    top = z.max(axis=1, keepdims=True) if z.shape[0] else np.zeros((0, 1))
    e = np.exp(z - top)
    total = e.sum(axis=1, keepdims=True)
    loss = (top[:, 0] - z[rows, y]) + np.log(total[:, 0])
    dlogits = e / total
    dlogits[rows, y] -= 1.0
    return loss, dlogits


def softmax_xent_bytes(n_tokens: int, vocab: int) -> int:
    """Bytes the fused kernel must move at least (float32 logits, int32 labels): logits read once, dlogits written
    once, labels read and the loss written: 8·T·V + 8·T."""
    check_int("n_tokens", n_tokens, low=0)
    check_int("vocab", vocab, low=1)
    return 8 * n_tokens * vocab + 8 * n_tokens


def unfused_softmax_xent_bytes(n_tokens: int, vocab: int) -> int:
    """Bytes of the unfused chain: a softmax kernel reads z and writes p (8·T·V), the loss gathers p at each label
    (labels and p[y] read, loss written: 12·T), the gradient reads p and the labels and writes dlogits (8·T·V +
    4·T). The softmax p (4·T·V bytes) is kept in memory from the forward to the backward."""
    check_int("n_tokens", n_tokens, low=0)
    check_int("vocab", vocab, low=1)
    return 16 * n_tokens * vocab + 16 * n_tokens
