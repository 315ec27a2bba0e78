"""Wrong answers each check of 10_peft must reject on every seed (tests/catalogue.py runs them)."""

from __future__ import annotations

import numpy as np
from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.peft import (
    check_lora_forward,
    check_lora_merge,
    check_lora_param_count,
    reference_lora_forward,
    reference_lora_merge,
)


def reference_lora_param_count(shapes, rank, n_layers):
    return n_layers * sum(rank * (d_in + d_out) for d_in, d_out in shapes)


CATALOGUES = [
    Catalogue("lora_forward", check_lora_forward, reference_lora_forward, {
        "forms the merged matrix W₀ + s·A·B": lambda x, w, a, b, s: x @ (w + s * (a @ b)),
        "ignores the scale": lambda x, w, a, b, s: x @ w + (x @ a) @ b,
        "scale divided by the rank again": lambda x, w, a, b, s: x @ w + s / a.shape[1] * ((x @ a) @ b),
        "forgets the frozen path x W₀": lambda x, w, a, b, s: s * ((x @ a) @ b),
        "the frozen path only": lambda x, w, a, b, s: x @ w,
        "subtracts the update": lambda x, w, a, b, s: x @ w - s * ((x @ a) @ b),
        "uses the first rank-1 component only": lambda x, w, a, b, s: x @ w + s * np.outer(x @ a[:, 0], b[0]),
    }),
    Catalogue("lora_merge", check_lora_merge, reference_lora_merge, {
        "ignores the scale": lambda w, a, b, s: w + a @ b,
        "returns the update only": lambda w, a, b, s: s * (a @ b),
        "subtracts the update (unmerge)": lambda w, a, b, s: w - s * (a @ b),
        "scale divided by the rank again": lambda w, a, b, s: w + s / a.shape[1] * (a @ b),
        "uses the first rank-1 component only": lambda w, a, b, s: w + s * np.outer(a[:, 0], b[0]),
        "returns W₀ unchanged": lambda w, a, b, s: w.copy(),
    }),
    Catalogue("lora_param_count", check_lora_param_count, reference_lora_param_count, {
        "assumes square weights (2·r·d_in)": lambda shapes, r, n: n * sum(2 * r * d_in for d_in, _ in shapes),
        "forgets the layers": lambda shapes, r, n: sum(r * (d_in + d_out) for d_in, d_out in shapes),
        "counts the full d_in·d_out": lambda shapes, r, n: n * sum(d_in * d_out for d_in, d_out in shapes),
        "adds a bias per output": lambda shapes, r, n: n * sum(r * (d_in + d_out) + d_out for d_in, d_out in shapes),
        "the example's formula (2·r·d·2·L)": lambda shapes, r, n: 2 * r * shapes[0][0] * len(shapes) * n,
        "counts one shape only": lambda shapes, r, n: n * r * (shapes[0][0] + shapes[0][1]),
        "rank plus one": lambda shapes, r, n: n * sum((r + 1) * (d_in + d_out) for d_in, d_out in shapes),
    }),
]

test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
