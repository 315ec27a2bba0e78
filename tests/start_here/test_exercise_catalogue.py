"""Do the warm-up checks reject every plausible wrong answer on every seed (and pass the reference)?"""

from __future__ import annotations

import math

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.start_here import check_add_intensity, check_tensor_bytes

SIZES = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}


def tensor_bytes(shape, dtype):
    return math.prod(shape) * SIZES[dtype]


def examples_then_fp32(shape, dtype):
    if tuple(shape) == (4096, 4096) and dtype == "fp16":
        return 33554432
    return math.prod(shape) * 4


def add_intensity(n, b):
    return n / (3 * n * b)


CATALOGUES = [
    Catalogue("tensor_bytes", check_tensor_bytes, tensor_bytes, {
        "bits, not bytes": lambda shape, dtype: math.prod(shape) * SIZES[dtype] * 8,
        "bf16 stored in 4 bytes (fp32's range, fp32's size)":
            lambda shape, dtype: math.prod(shape) * {**SIZES, "bf16": 4}[dtype],
        "int4 rounded up to a whole byte per value":
            lambda shape, dtype: math.prod(shape) * math.ceil(SIZES[dtype]),
        "sum of the dimensions": lambda shape, dtype: sum(shape) * SIZES[dtype],
        "first two dimensions only": lambda shape, dtype: math.prod(tuple(shape)[:2]) * SIZES[dtype],
        "count in 32-bit integers (overflows)":
            lambda shape, dtype: int(np.prod(np.asarray(shape, dtype=np.int32), dtype=np.int32)) * SIZES[dtype],
        "the examples special-cased, else fp32": examples_then_fp32,
        "a scalar counted as zero elements":
            lambda shape, dtype: (math.prod(shape) if len(shape) else 0) * SIZES[dtype],
    }),
    Catalogue("add_intensity", check_add_intensity, add_intensity, {
        "forgets the write of c": lambda n, b: n / (2 * n * b),
        "bits, not bytes": lambda n, b: n / (3 * n * b * 8),
        "ignores bytes_per_element (fp32 assumed)": lambda n, b: n / (3 * n * 4),
        "bytes per FLOP (inverted)": lambda n, b: 3 * n * b / n,
        "two FLOPs per add": lambda n, b: 2 * n / (3 * n * b),
        "integer division": lambda n, b: n // (3 * n * b),
        "the example special-cased": lambda n, b: 1 / 12,
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
