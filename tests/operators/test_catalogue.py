"""Does the catalogue price each operator at its canonical shape?"""

import pytest

from mlsys_lab.operators import CATALOGUE, OP_CLASSES, catalogue_cost


def test_catalogue_covers_the_four_classes():
    classes = {catalogue_cost(name, 256).op_class for name in CATALOGUE}
    assert classes == set(OP_CLASSES)


def test_canonical_shapes_by_hand():
    """N = 4: add reads two 4×4 tensors and writes one (3·16·4 bytes); gelu is 9 FLOP per element;
    the sum reduces 16 elements into 4 rows (12 additions); batched matmul is 16 heads of (4×64)·(64×4)."""
    add = catalogue_cost("add", 4)
    assert add.flop == 16 and add.n_bytes == 3 * 16 * 4
    assert catalogue_cost("gelu", 4, "bf16").flop == 9 * 16 and catalogue_cost("gelu", 4, "bf16").n_bytes == 64
    assert catalogue_cost("sum", 4).flop == 12
    assert catalogue_cost("batched matmul", 4).flop == 16 * 2 * 4 * 4 * 64
    assert catalogue_cost("reshape", 4).n_bytes == 0


def test_unknown_operator_is_named():
    with pytest.raises(ValueError, match="op_name must be one of"):
        catalogue_cost("fft", 8)
