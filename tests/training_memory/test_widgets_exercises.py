"""Does the lesson's explorer compute what the library says, and do its checks catch wrong answers?"""

import numpy as np

from mlsys_lab.exercises import training_memory as ex
from mlsys_lab.training_memory.accounting import TRANSFORMER_SHAPES, transformer_training_bytes
from mlsys_lab.widgets.training_memory import TrainingMemoryExplorer


def test_explorer_readout_and_error():
    explorer = TrainingMemoryExplorer()
    explorer.set(model="GPT-2 XL (1.5B)", batch=2, seq=1024, precision="fp32", optimizer="sgd")
    expected = transformer_training_bytes(TRANSFORMER_SHAPES["GPT-2 XL (1.5B)"], 2, 1024, "fp32", "sgd")
    assert explorer.error is None
    assert explorer.result["breakdowns"]["none"] == expected
    assert explorer.readout["bytes per parameter (states)"] == "8"
    heights = sum(bar[0].get_height() for bar in explorer.bars.values())
    assert np.isclose(heights, expected.total / 1e9)


def _capture(check, fn, capsys):
    check(fn)
    return capsys.readouterr().out.strip()


def test_checks_pass_the_reference_and_fail_wrong_answers(capsys):
    assert _capture(ex.check_layer_norm_backward, ex.reference_layer_norm_backward, capsys).startswith("✓")
    assert _capture(ex.check_layer_norm_backward, lambda x, g: g, capsys).startswith("✗")
    assert _capture(ex.check_training_bytes, ex.reference_training_bytes, capsys).startswith("✓")
    states_only = lambda L, h, a, V, b, s: 16 * (12 * L * h * h + 13 * L * h + V * h)  # noqa: E731
    assert _capture(ex.check_training_bytes, states_only, capsys).startswith("✗")

    def groupwise(w, bits, group):
        q_max = 2 ** (bits - 1) - 1
        groups = w.reshape(w.shape[0], -1, group)
        scale = np.abs(groups).max(axis=2, keepdims=True) / q_max
        return (np.round(groups / scale) * scale).reshape(w.shape)

    def per_tensor(w, bits, group):
        scale = np.abs(w).max() / (2 ** (bits - 1) - 1)
        return np.round(w / scale) * scale

    assert _capture(ex.check_quantize_groupwise, groupwise, capsys).startswith("✓")
    assert _capture(ex.check_quantize_groupwise, per_tensor, capsys).startswith("✗")

    def todo(*args):
        raise NotImplementedError()

    assert _capture(ex.check_quantize_groupwise, todo, capsys).startswith("…")
