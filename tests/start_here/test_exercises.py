"""Do the warm-up checks accept a right answer and reject the classic wrong ones?"""

from __future__ import annotations

import math

from mlsys_lab.exercises.start_here import check_add_intensity, check_tensor_bytes
from mlsys_lab.units import BYTES_PER_DTYPE


def verdict(capsys, check, fn) -> str:
    check(fn)
    return capsys.readouterr().out.strip()


def test_tensor_bytes_check(capsys):
    def right(shape, dtype):
        return math.prod(shape) * BYTES_PER_DTYPE[dtype]

    assert verdict(capsys, check_tensor_bytes, right) == "✓ tensor_bytes: 22/22 cases"
    assert verdict(capsys, check_tensor_bytes, lambda shape, dtype: math.prod(shape)).startswith("✗")  # elements
    assert verdict(capsys, check_tensor_bytes, lambda shape, dtype: sum(shape) * 4).startswith("✗")


def test_add_intensity_check(capsys):
    assert verdict(capsys, check_add_intensity, lambda n, b: n / (3 * n * b)) == "✓ add_intensity: 13/13 cases"
    forgot_the_write = lambda n, b: n / (2 * n * b)  # noqa: E731
    assert verdict(capsys, check_add_intensity, forgot_the_write).startswith("✗")


def test_tensor_bytes_check_draws_only_the_formats_the_exercise_lists(capsys, monkeypatch):
    """The exercise lists fp64, fp32, bf16, fp16, fp8, int8 and int4: a table of those passes on every seed."""
    listed = {"fp64": 8, "fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
    for seed in range(20):
        monkeypatch.setenv("MLSYS_LAB_CHECK_SEED", str(seed))
        line = verdict(capsys, check_tensor_bytes, lambda shape, dtype: math.prod(shape) * listed[dtype])
        assert line.startswith("✓"), (seed, line)
