"""Does the lesson 10 explorer work headless, and do the checks catch wrong answers?"""

from mlsys_lab.exercises.peft import (
    check_lora_forward,
    check_lora_merge,
    check_lora_param_count,
    reference_lora_forward,
    reference_lora_merge,
)
from mlsys_lab.peft.accounting import lora_params_for_shapes, peft_memory
from mlsys_lab.widgets.peft import QLoRAMemoryExplorer


def test_qlora_explorer_reproduces_65b_in_48gb():
    ex = QLoRAMemoryExplorer()
    assert ex.error is None and ex.readout["fits"] == "yes"
    ex.set(quantization="bf16")
    assert ex.readout["fits"] == "no"
    ex.set(model="GPT-3 175B", targets="q, v", rank=4)
    assert ex.readout["trainable (LoRA) params"] == "18.9 M"
    assert ex.result["n_lora"] == peft_memory("GPT-3 175B", 4, "q, v", "bf16")["n_lora"]


def _verdict(check, fn, capsys):
    check(fn)
    return capsys.readouterr().out


def test_peft_checks_pass_references_and_catch_mistakes(capsys):
    assert _verdict(check_lora_forward, reference_lora_forward, capsys).startswith("✓")
    assert _verdict(check_lora_forward, lambda x, w, a, b, s: x @ w + (x @ a) @ b, capsys).startswith("✗")
    assert _verdict(check_lora_merge, reference_lora_merge, capsys).startswith("✓")
    assert _verdict(check_lora_merge, lambda w, a, b, s: w + s * (a @ b).T if a.shape[0] == b.shape[1] else w,
                    capsys).startswith("✗")
    assert _verdict(check_lora_param_count, lora_params_for_shapes, capsys).startswith("✓")
    assert _verdict(check_lora_param_count, lambda shapes, r, n: 2 * r * shapes[0][0] * len(shapes) * n,
                    capsys).startswith("✗")


def test_new_checks_pass_references_and_name_what_is_wrong(capsys):
    from mlsys_lab.exercises.peft import (
        check_lora_backward,
        check_nf4_quantize,
        check_qlora_step,
        reference_lora_backward,
        reference_nf4_quantize,
        reference_qlora_step,
    )

    assert _verdict(check_lora_backward, reference_lora_backward, capsys).startswith("✓")
    merged = _verdict(check_lora_backward, lambda x, w, a, b, s, dy: (
        dy @ (w + s * (a @ b)).T, *reference_lora_backward(x, w, a, b, s, dy)[1:]), capsys)
    assert merged.startswith("✗") and "dX is off by" in merged and "2^30" in merged
    assert _verdict(check_nf4_quantize, reference_nf4_quantize, capsys).startswith("✓")
    assert "absmax has shape" in _verdict(check_nf4_quantize, lambda w, levels, bs: ([0] * len(w), 1.0), capsys)
    assert _verdict(check_qlora_step, reference_qlora_step, capsys).startswith("✓")

    def frozen_base_moves(state, x, labels, lr):
        new, loss = reference_qlora_step(state, x, labels, lr)
        return {**new, "codes1": new["codes1"] ^ 1}, loss

    assert "the frozen base changed" in _verdict(check_qlora_step, frozen_base_moves, capsys)
