"""The CUDA exercise of 06_training_memory: fused softmax cross-entropy, forward and backward in one kernel.

``softmax_xent_cuda(logits, labels)`` is the learner's launcher: logits (T, V) float32 and labels (T,) int32 device
arrays; it returns ``(loss, dlogits)``, two new float32 device arrays: loss (T,) = logsumexp(z_t) − z_t[y_t] per
token (nats) and dlogits (T, V) = softmax(z_t) − onehot(y_t), the gradient of the *sum* of the per-token losses
(exercise 6's VJP with g = 1 on every row). The learner's kernel gives each row a block: the online max and sum
(Milakov & Gimelshein 2018) merged by a block reduction, then the gradient written in a second pass.

The cases are shaped to catch what goes wrong: no token, one token, one class, two classes, widths that are no
multiple of a warp or a block, logits of ±10⁴ in a row (exp overflows without the max shift), a row of equal
logits, labels at 0 and V − 1, random shapes, many rows (a reduction without its barrier races), and GPT-2's
vocabulary of 50,257 (odd: no float4 rows). Tolerance: a relative 3·10⁻⁴ of the float64 reference, plus an absolute
10⁻⁶ on dlogits and 10⁻⁶ × max(1, the row's largest |logit|) on the loss: a float32 sum of 50,257 terms in one
thread is off by up to about 10⁻⁴ (measured: correct, and accepted), and m + log s rounds at the scale of m.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsys_lab.backend import to_host
from mlsys_lab.exercises import Case, rng, short
from mlsys_lab.exercises.cuda_kernels import (
    KernelRace,
    TimedCase,
    check_kernel,
    launcher,
    speed_point,
)
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.training_memory.softmax_xent import (
    softmax_xent_bytes,
    softmax_xent_on_gpu,
    softmax_xent_reference,
)

RTOL, GRAD_ATOL, LOSS_ATOL = 3e-4, 1e-6, 1e-6  # LOSS_ATOL is per unit of the row's largest |logit| (at least 1)
# The floor, a fraction of the course's kernel's speed. On the H200 at 4096 x 32768 the course's kernel ran at
# about 93% of copy bandwidth (its second read of each row comes from L2). The notebook's scalar solution runs at
# about 66% of it; the same kernel with loops that step by blockDim.x and the accurate expf at 45%; three passes
# over the row at 74% (the re-reads hit L2 too); one thread per row at 3%.
FLOOR = 0.5
# Timed at 1024 x 32768: a vocabulary of 32K, 2^25 logits (128 MiB read, 128 MiB of dlogits written), so that the
# arguments and the result each cross the grader's socket in one message (course/wire.py's MAX_MESSAGE_BYTES).
TIMED_SHAPE = (1024, 32768)
EXAMPLE = (np.array([[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]], dtype=np.float32), np.array([0, 2], dtype=np.int32))
LOOKALIKES = {
    "the course's kernel with loops that step by blockDim.x (a stride known only at run time: one load in flight "
    "per thread; step by a compile-time THREADS and unroll, and use __expf)":
        lambda z, y: softmax_xent_on_gpu(z, y, "runtime_stride"),
    "the course's kernel in three passes (max, sum, write: the row read three times; merge the max and the sum "
    "in one online pass)": lambda z, y: softmax_xent_on_gpu(z, y, "three_pass"),
    "the course's kernel with one thread per row (uncoalesced, too few threads: give each row a block)":
        lambda z, y: softmax_xent_on_gpu(z, y, "thread_per_row"),
}


def _problem(got: Any, expected: tuple) -> str | None:
    """What is wrong with ``got`` as (loss, dlogits) against ``expected`` = (loss, dlogits, row_scale), or None."""
    want_loss, want_grad, row_scale = expected
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return f"return a pair (loss, dlogits); got {short(got)}"
    for name, value, want in (("loss", got[0], want_loss), ("dlogits", got[1], want_grad)):
        if not isinstance(value, np.ndarray):
            return f"{name} must be an array (CuPy, on the GPU); got {type(value).__name__}"
        if value.shape != want.shape:
            return f"{name} has shape {value.shape}; expected {want.shape}"
        if value.dtype != np.float32:
            return f"{name} has dtype {value.dtype}; the kernel's outputs are float32"
    loss, grad = (np.asarray(v, dtype=np.float64) for v in got)
    bad = ~(np.abs(loss - want_loss) <= RTOL * np.abs(want_loss) + LOSS_ATOL * np.maximum(row_scale, 1.0))
    if bad.any():
        t = int(np.argmax(bad))
        return f"loss[{t}] is {loss[t]:.7g}, expected {want_loss[t]:.7g}{_why(loss[t])}"
    bad = ~(np.abs(grad - want_grad) <= RTOL * np.abs(want_grad) + GRAD_ATOL)
    if bad.any():
        t, j = (int(v) for v in np.argwhere(bad)[0])
        label = "the label's" if want_grad[t, j] < 0 else "not the label's"
        return (f"dlogits[{t}, {j}] ({label} column) is {grad[t, j]:.7g}, expected {want_grad[t, j]:.7g}"
                f"{_why(grad[t, j])}")
    return None


def _why(value: float) -> str:
    if np.isnan(value):
        return " (NaN: unwritten, or inf − inf: subtract the row's max before exp)"
    if np.isinf(value):
        return " (inf: exp overflows past 88; subtract the row's max before exp)"
    return ""


def _compare(got: Any, expected: Any) -> bool:
    """The cases judge in their ``check_result`` (which names the first wrong entry): ``expected`` is None there.
    The timed case compares with the course's result here."""
    return True if expected is None else _problem(got, expected) is None


def _case(label: str, logits: np.ndarray, labels: np.ndarray) -> Case:
    logits, labels = logits.astype(np.float32), labels.astype(np.int32)
    loss, grad = softmax_xent_reference(logits, labels)
    scale = np.abs(logits).max(axis=1) if logits.size else np.zeros(0)
    return Case(f"{label}: T = {logits.shape[0]}, V = {logits.shape[1]}", (logits, labels),
                check_result=lambda got, e=(loss, grad, scale): _problem(got, e))


def _inputs(g, n_tokens: int, vocab: int, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    logits = (scale * g.standard_normal((n_tokens, vocab))).astype(np.float32)
    labels = g.integers(0, vocab, size=n_tokens)
    labels[: min(n_tokens, 2)] = [0, vocab - 1][: min(n_tokens, 2)]  # the first and last class
    return logits, labels


def softmax_xent_cases(g) -> list[Case]:
    """The example, the boundaries and random shapes, up to GPT-2's vocabulary (13 cases)."""
    cases = [_case("the example", *EXAMPLE), _case("no token", *_inputs(g, 0, 7)),
             _case("one token", *_inputs(g, 1, int(g.integers(500, 3000)))),
             _case("one class (loss 0, gradient 0)", *_inputs(g, 3, 1)), _case("two classes", *_inputs(g, 5, 2)),
             _case("no multiple of a warp", *_inputs(g, 9, 33)), _case("no multiple of a block", *_inputs(g, 7, 1025))]
    big, big_labels = _inputs(g, 6, 300, scale=1e4)  # exp(10^4) overflows float32 (and float64) at once
    big[2] = 1e4  # a row of 10^4: every class equally likely, at a scale where exp cannot be taken unshifted
    big[3] = -1e4
    big[4, big_labels[4]] = 2e4  # the label at the row's max
    cases.append(_case("logits of ±10⁴", big, big_labels))
    cases.append(_case("a row of equal logits", np.full((2, 1000), 7.0), np.array([0, 999])))
    for _ in range(2):
        cases.append(_case("random", *_inputs(g, int(g.integers(1, 200)), int(g.integers(2, 5000)))))
    cases.append(_case("many rows", *_inputs(g, 1000, 4099)))
    cases.append(_case("GPT-2's vocabulary", *_inputs(g, 4, 50257)))
    return cases


def softmax_xent_timed(g) -> TimedCase:
    logits, labels = _inputs(g, *TIMED_SHAPE)
    row_scale = np.abs(logits).max(axis=1)
    return TimedCase(f"T = {TIMED_SHAPE[0]}, V = {TIMED_SHAPE[1]}", (logits, labels.astype(np.int32)),
                     softmax_xent_on_gpu, softmax_xent_bytes(*TIMED_SHAPE), FLOOR,
                     expected_of=lambda course: (*(np.asarray(v, np.float64) for v in to_host(course)),
                                                 row_scale),
                     lookalikes=LOOKALIKES)


@speed_point
def check_softmax_xent_cuda(fn) -> None:
    """``fn(logits, labels)`` -> (loss (T,), dlogits (T, V)), float32, on the GPU: 13 cases within a relative 3e-4
    of the float64 reference; then timed against the course's kernel at 1024 x 32768 (floor 50%)."""
    g = rng()
    check_kernel("softmax_xent_cuda", fn, lambda: softmax_xent_cases(g), _compare,
                 lambda: softmax_xent_timed(g))


def race_softmax_xent_cuda(fn) -> KernelRace:
    """The learner's ``softmax_xent_cuda`` timed beside the course's kernel and a copy on this GPU ("see it")."""
    loader.require_gpu("race_softmax_xent_cuda")
    return softmax_xent_timed(rng()).race(launcher(fn))[0]
