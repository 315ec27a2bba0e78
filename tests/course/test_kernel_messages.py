"""Does every kernel exercise's timed case cross the grader's socket? Its arguments go to the worker in one message
(``hold``) and the learner's result comes back in one (``last``): each must fit :data:`wire.MAX_MESSAGE_BYTES`, and
together they must fit what one exercise may receive (:data:`checks.MAX_RECEIVED_BYTES`). A timed case that does not
fit fails every submission on a GPU only, where CI cannot see it; here the sizes are computed on any machine."""

import numpy as np
import pytest

from mlsys_lab.course import checks, wire
from mlsys_lab.exercises import (
    memory_hierarchy_cuda,
    memory_hierarchy_mma_cuda,
    moe_cuda,
    operators_cuda,
    rng,
    roofline_cuda,
    training_memory_cuda,
)

F32 = 4


def _permute_out(x, expert, slot, n_experts, capacity):
    return n_experts * capacity * x.shape[1] * F32


# exercise: (its timed case, the bytes of the result its launcher returns for the case's arguments)
TIMED = {
    "bias_gelu": (operators_cuda.bias_gelu_timed, lambda x, bias, scale: x.nbytes),
    "reduce_sum": (roofline_cuda.reduce_sum_timed, lambda x: F32),
    "transpose_cuda": (memory_hierarchy_cuda.transpose_timed, lambda a: a.nbytes),
    "softmax_rows_cuda": (memory_hierarchy_cuda.softmax_timed, lambda x: x.nbytes),
    "sgemm_tiled_cuda": (memory_hierarchy_cuda.sgemm_timed, lambda a, b: a.shape[0] * b.shape[1] * F32),
    "bf16_mma_cuda": (memory_hierarchy_mma_cuda.bf16_mma_timed, lambda a, b: a.shape[0] * b.shape[0] * F32),
    "softmax_xent_cuda": (training_memory_cuda.softmax_xent_timed,
                          lambda logits, labels: logits.nbytes + logits.shape[0] * F32),
    "moe_permute_cuda": (moe_cuda.permute_timed, _permute_out),
    "moe_unpermute_cuda": (moe_cuda.unpermute_timed,
                           lambda y, expert, slot, weight: expert.shape[0] * y.shape[2] * F32),
}


def message_bytes(n_array_bytes: int) -> int:
    """What ``n_array_bytes`` of arrays take in a message: base64 (4/3), with a kilobyte for headers and JSON."""
    return 4 * -(-n_array_bytes // 3) + 1024


def test_every_kernel_exercise_is_listed():
    from mlsys_lab.course.grade import speed_point_exercises

    assert set(TIMED) == set(speed_point_exercises())


@pytest.mark.parametrize("exercise", list(TIMED))
def test_timed_case_crosses_the_socket(exercise):
    make_timed, result_bytes = TIMED[exercise]
    timed = make_timed(rng())
    sent = message_bytes(sum(a.nbytes for a in timed.args if isinstance(a, np.ndarray)))
    received = message_bytes(result_bytes(*timed.args))
    assert sent <= wire.MAX_MESSAGE_BYTES, f"{exercise}: its arguments take {sent:,} bytes in a message"
    assert received <= wire.MAX_MESSAGE_BYTES, f"{exercise}: its result takes {received:,} bytes in a message"
    assert received < checks.MAX_RECEIVED_BYTES // 2, f"{exercise}: its result leaves too little for the cases"
