"""Does the GPU lane's nbval sanitizer (tests/gpu_lane_sanitize.cfg, used by `make test-gpu`) make a CUDA exercise's
GPU verdict equal to the committed CPU one, and leave a failing verdict different?"""

from __future__ import annotations

import re
from pathlib import Path

from nbval.plugin import get_sanitize_patterns

from mlsys_lab.exercises import not_graded_here

CONFIG = Path(__file__).resolve().parents[1] / "gpu_lane_sanitize.cfg"


def sanitized(text: str) -> str:
    for regex, replace in get_sanitize_patterns(CONFIG.read_text()):
        text = re.sub(regex, replace, text)
    return text


def test_a_passing_gpu_verdict_reads_as_the_committed_cpu_verdict(capsys):
    not_graded_here("transpose_cuda", "a CUDA GPU", "open the Colab badge for a free T4")
    on_cpu = capsys.readouterr().out
    assert on_cpu.startswith("… transpose_cuda: needs a CUDA GPU, not graded here")
    assert sanitized(on_cpu) == sanitized("✓ transpose_cuda: 12/12 cases\n") == (
        "transpose_cuda: graded where a CUDA GPU is\n")


def test_a_failing_verdict_or_another_exercise_still_differs():
    committed = sanitized("… softmax_rows_cuda: needs a CUDA GPU, not graded here (open the Colab badge)\n")
    assert sanitized("✗ softmax_rows_cuda: case 3 of 13, expected 1.0, got 0.5\n") != committed
    assert sanitized("✓ transpose_cuda: 12/12 cases\n") != committed
