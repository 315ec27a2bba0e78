"""What attention keeps for its backward, per layer and per model: a fused backward's O and log-sum-exp against P."""

import pytest

from mlsys_lab.training_memory.accounting import (
    TRANSFORMER_SHAPES,
    TransformerShape,
    attention_backward_model_bytes,
    transformer_layer_activation_bytes,
)


def test_llama_2_7b_by_hand():
    """32 layers of 32 heads of 128, batch 1, bf16. S = 4096: P is 32·4096²·2 = 1 GiB a layer, O and L
    32·4096·(2·128 + 4) = 34,078,720 bytes. S = 16384: P 16 GiB a layer, 512 GiB for the model."""
    shape = TRANSFORMER_SHAPES["Llama-2 7B"]
    layer, model = attention_backward_model_bytes(shape, 1, 4096)
    assert (layer.stored_p, layer.fused) == (2 ** 30, 34_078_720)
    assert (model.stored_p, model.fused, model.qkv) == (32 * 2 ** 30, 32 * 34_078_720, 32 * layer.qkv)
    layer, model = attention_backward_model_bytes(shape, 1, 16384)
    assert (layer.stored_p, model.stored_p) == (2 ** 34, 2 ** 39)
    assert layer.fused == 4 * 34_078_720 and layer.ratio == pytest.approx(16384 * 2 / 260)


@pytest.mark.parametrize("name", sorted(TRANSFORMER_SHAPES))
def test_stored_p_is_korthikantis_softmax_term(name):
    """Korthikanti et al. (2022) count 5·a·s²·b bytes per layer for attention's S² terms: the softmax output P
    (2·a·s²·b), the dropout mask (a·s²·b) and the dropout output (2·a·s²·b); selective recomputation drops all five.
    P is two fifths of the difference between no recomputation and selective."""
    shape = TRANSFORMER_SHAPES[name]
    layer, _ = attention_backward_model_bytes(shape, 2, 2048)
    difference = (transformer_layer_activation_bytes(2, 2048, shape.hidden, shape.n_heads, "none")
                  - transformer_layer_activation_bytes(2, 2048, shape.hidden, shape.n_heads, "selective"))
    assert layer.stored_p == pytest.approx(difference * 2 / 5, rel=1e-12)


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="n_heads"):
        attention_backward_model_bytes(TransformerShape("odd", 2, 100, 3, 10), 1, 16)
    with pytest.raises(ValueError, match="seq"):
        attention_backward_model_bytes(TRANSFORMER_SHAPES["Llama-2 7B"], 1, 0)
