"""On a CUDA GPU the capstone's loss runs on a fused softmax cross-entropy kernel: yours (lesson 06), else the course's.

The model is NumPy (float64 by default); the kernel is float32 on the GPU and returns the per-token losses and the
gradient of their *sum*, softmax − onehot. :func:`kernel_cross_entropy` adapts it to the capstone's operator
``cross_entropy(logits, labels, label_smoothing, grad_out)``: the logits go to the GPU as float32, the losses and
the gradient come back in the model's dtype, each row's gradient scaled by its ``grad_out`` (1/N for the mean).
The kernel handles no label smoothing (the capstone trains without it). The single-process and the parallel runs
use the same operator, so the equality checks compare like with like; each row's result depends on that row alone.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from mlsys_lab import backend
from mlsys_lab.validation import check_array, check_number

PIECE = "softmax_xent_cuda"  # the exercise of lesson 06 whose kernel this runs


def kernel_cross_entropy(launcher: Callable) -> Callable:
    """The capstone's ``cross_entropy`` operator computed by ``launcher(logits_f32, labels_i32)`` -> (loss, dlogits)
    on device arrays (the learner's ``softmax_xent_cuda`` or the course's ``softmax_xent_on_gpu``)."""
    if not callable(launcher):
        raise TypeError(f"launcher must be the kernel's launcher (a function); got {type(launcher).__name__}")

    def cross_entropy(logits, labels, label_smoothing, grad_out):
        rows = check_array("logits", logits, ndim=2, kinds="f").shape[0]
        check_array("labels", labels, kinds="iu", shape=(rows,))
        check_array("grad_out", grad_out, kinds="f", shape=(rows,))
        check_number("label_smoothing", label_smoothing, low=0.0, high=0.0)  # the kernel has none
        xp = backend.xp
        loss, dlogits = launcher(xp.asarray(logits, dtype=xp.float32), xp.asarray(labels, dtype=xp.int32))
        dtype = np.asarray(logits).dtype
        losses = backend.asnumpy(loss).astype(dtype)
        grads = backend.asnumpy(dlogits).astype(dtype) * np.asarray(grad_out, dtype=dtype)[:, None]
        return losses, grads

    cross_entropy.__name__ = f"kernel_cross_entropy({getattr(launcher, '__name__', 'kernel')})"
    return cross_entropy
