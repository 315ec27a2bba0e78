"""Does the memory accounting match the papers' figures and the engine's measured allocation?"""

import pytest

from mlsys_lab.training_memory.accounting import (
    TRANSFORMER_SHAPES,
    TransformerShape,
    measure_peak_bytes,
    mlp_step_bytes,
    training_memory_bytes,
    transformer_layer_activation_bytes,
    transformer_params,
    transformer_training_bytes,
)
from mlsys_lab.training_memory.training import fresh_adam_steps
from mlsys_lab.units import format_bytes


def test_bytes_per_parameter():
    assert training_memory_bytes(1, "fp32", "adam").total == 16  # 4 + 4 + 8 (the notes' formula)
    mixed = training_memory_bytes(1, "mixed", "adam")
    assert (mixed.weights, mixed.gradients, mixed.master_weights + mixed.optimizer_state) == (2, 2, 12)
    assert training_memory_bytes(1, "fp32", "sgd").total == 8
    assert training_memory_bytes(1, "mixed", "sgd_momentum").total == 12


def test_zero_paper_examples():
    """ZeRO §3.1: 1.5B-parameter GPT-2 needs ≥ 24 GB; 7.5B parameters need 120 GB (mixed Adam, 16Ψ)."""
    assert training_memory_bytes(1_500_000_000, "mixed", "adam").total == 24e9
    assert training_memory_bytes(7_500_000_000, "mixed", "adam").total == 120e9


def test_korthikanti_activation_formula_by_its_parts():
    s, b, h, a = 2, 1, 4, 2
    attention = 11 * s * b * h + 5 * a * s * s * b
    assert transformer_layer_activation_bytes(b, s, h, a) == attention + 19 * s * b * h + 4 * s * b * h
    assert transformer_layer_activation_bytes(b, s, h, a, "selective") == 34 * s * b * h
    assert transformer_layer_activation_bytes(b, s, h, a, "full") == 2 * s * b * h
    assert transformer_layer_activation_bytes(b, s, h, a, value_bytes=4) == 66 * s * b * h + 9 * a * s * s * b
    # GPT-3 175B, s = 2048, b = 1: 34·sbh + 5·a·s²·b = 0.856 GB + 2.01 GB per layer
    assert transformer_layer_activation_bytes(1, 2048, 12288, 96) == pytest.approx(2.869e9, rel=1e-3)


def test_transformer_params_match_the_published_sizes():
    assert TRANSFORMER_SHAPES["GPT-3 175B"].n_params == pytest.approx(175e9, rel=0.01)
    assert TRANSFORMER_SHAPES["GPT-2 XL (1.5B)"].n_params == pytest.approx(1.56e9, rel=0.01)
    assert transformer_params(1, 2, 3) == 12 * 4 + 13 * 2 + 6
    shape = TRANSFORMER_SHAPES["Llama-2 7B"]
    full = transformer_training_bytes(shape, 1, 4096, "mixed", "adam", "full")
    assert full.activations == 32 * 2 * 4096 * 4096 and full.total == 16 * shape.n_params + full.activations


def test_llama_2_shapes_count_the_released_parameters():
    """Llama-2 7B: L(4h² + 3hf + 2h) + h + 2Vh with h = 4096, f = 11008, V = 32000, L = 32: 6,738,415,616."""
    seven = TRANSFORMER_SHAPES["Llama-2 7B"]
    h, f, v, n_layers = 4096, 11008, 32000, 32
    assert seven.n_params == n_layers * (4 * h * h + 3 * h * f + 2 * h) + h + 2 * v * h == 6_738_415_616
    assert TRANSFORMER_SHAPES["Llama-2 13B"].n_params == 13_015_864_320
    # the GPT convention on the same sizes (a 4h GELU MLP, biases, tied embedding) undercounts by 2.4%
    gpt_like = TransformerShape("4h", n_layers, h, 32, v)
    assert gpt_like.n_params == 12 * n_layers * h * h + 13 * n_layers * h + v * h
    assert gpt_like.n_params / seven.n_params == pytest.approx(0.976, abs=1e-3)
    tiny = TransformerShape("tiny", 1, 2, 1, 3, d_ff=5, n_mlp_matrices=3, biases=False, norm="rmsnorm",
                            tied_embeddings=False)
    assert tiny.n_params == (4 * 4 + 3 * 10) + 2 * 2 + 2 + 2 * 3 * 2
    with pytest.raises(ValueError, match="norm"):
        TransformerShape("bad", 1, 2, 1, 3, norm="batchnorm")


def test_one_shape_class_counts_both_ways_by_hand():
    """A 1-layer shape, h = 2, V = 3, MLP width f = 8: every weight, bias and norm counted by hand."""
    gpt = TransformerShape("tiny", n_layers=1, hidden=2, n_heads=1, vocab=3)
    assert gpt.d_ff == 8 and gpt.linear_shapes() == {"q": (2, 2), "k": (2, 2), "v": (2, 2), "o": (2, 2),
                                                     "up": (2, 8), "down": (8, 2)}
    weights = 4 * 4 + 16 + 16
    assert gpt.n_params == weights + (4 * 2 + 8 + 2) + 4 * 2 + 3 * 2  # + biases + two LayerNorms + tied embedding
    assert gpt.n_matrix_params == weights + 2 * 3 * 2                 # + input and output embeddings
    swiglu = TransformerShape("gated", n_layers=2, hidden=2, n_heads=1, vocab=3, d_ff=5, n_mlp_matrices=3)
    assert set(swiglu.linear_shapes()) == {"q", "k", "v", "o", "gate", "up", "down"}
    assert swiglu.n_matrix_params == 2 * (4 * 4 + 3 * 10) + 2 * 6
    with pytest.raises(ValueError, match="n_mlp_matrices"):
        TransformerShape("bad", 1, 2, 1, 3, n_mlp_matrices=4)


@pytest.mark.parametrize("width, n_blocks, batch", [(64, 8, 256), (128, 8, 64), (64, 16, 64)])
def test_measured_allocation_within_ten_percent_of_the_estimate(width, n_blocks, batch):
    # the batch, a fresh model and two Adam steps; model and optimizer are returned, so they stay allocated
    _, peak, kept = measure_peak_bytes(lambda: fresh_adam_steps(32, width, n_blocks, 10, batch))
    estimate = mlp_step_bytes(32, width, n_blocks, 10, batch)
    assert peak == pytest.approx(estimate.total, rel=0.10)
    states = estimate.total - estimate.activations - estimate.workspace
    assert kept == pytest.approx(states, rel=0.02)  # weights, grads, m, v stay; the rest was freed


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="precision"):
        training_memory_bytes(10, "fp8")
    with pytest.raises(ValueError, match="n_params"):
        training_memory_bytes(-1)
    with pytest.raises(ValueError, match="recompute"):
        transformer_layer_activation_bytes(1, 1, 1, 1, "some")


def test_format_bytes():
    assert format_bytes(1.5e9) == "1.5 GB" and format_bytes(12) == "12 B"
