"""Do the lesson 10 and 11 explorers and checks work headless, and do the checks catch wrong answers?"""

import numpy as np

from mlsys_lab.exercises.moe import (
    check_aux_loss,
    check_route_with_capacity,
    reference_aux_loss,
    reference_route,
)
from mlsys_lab.exercises.peft import (
    check_lora_forward,
    check_lora_merge,
    check_lora_param_count,
    reference_lora_forward,
    reference_lora_merge,
)
from mlsys_lab.peft.accounting import lora_params_for_shapes
from mlsys_lab.widgets.moe import RoutingExplorer, route_batch
from mlsys_lab.widgets.peft import QLoRAMemoryExplorer, peft_memory


def test_qlora_explorer_reproduces_65b_in_48gb():
    ex = QLoRAMemoryExplorer()
    assert ex.error is None and ex.readout["fits"] == "yes"
    ex.set(quantization="bf16")
    assert ex.readout["fits"] == "no"
    ex.set(model="GPT-3 175B", targets="q, v", rank=4)
    assert ex.readout["trainable (LoRA) params"] == "18.9 M"


def test_peft_memory_parts_add_up():
    result = peft_memory("LLaMA-7B", 8, "q, v", "nf4+dq")
    assert result["n_lora"] == 2 * 8 * (4096 + 4096) * 32
    assert result["parts"]["Adam states"] == 8 * result["n_lora"]


def test_routing_explorer_shows_overflow_and_errors_in_place():
    ex = RoutingExplorer()
    assert ex.error is None
    ex.set(capacity_factor=3.0, skew=0.0)
    assert ex.readout["dropped (token, expert) pairs"] == "0.0 %"
    ex.set(capacity_factor=0.5)
    assert float(ex.readout["dropped (token, expert) pairs"].rstrip(" %")) >= 50
    ex.set(n_experts=2, top_k=4)
    assert ex.error is not None and "top_k" in ex.error


def test_route_batch_picture_counts_every_pick_once():
    result = route_batch(32, 8, 2, 1.0, 1.0)
    assert (result["picture"] > 0).sum() == 64
    assert result["load"].sum() == 64


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


def test_moe_checks_pass_references_and_catch_mistakes(capsys):
    assert _verdict(check_route_with_capacity, reference_route, capsys).startswith("✓")

    def no_capacity(logits, k, capacity):
        idx = np.argsort(-logits, axis=1)[:, :k]
        return idx, np.ones_like(idx, dtype=bool)

    assert _verdict(check_route_with_capacity, no_capacity, capsys).startswith("✗")
    assert _verdict(check_aux_loss, reference_aux_loss, capsys).startswith("✓")
    assert _verdict(check_aux_loss, lambda p, i: float((p.mean(axis=0) ** 2).sum()), capsys).startswith("✗")

    def todo(*args):
        raise NotImplementedError()

    assert _verdict(check_aux_loss, todo, capsys).startswith("…")
