"""Are the pruners and the sparse storage sizes right?"""

import numpy as np
import pytest

from mlsys_lab.training_memory.sparsity import csr_bytes, dense_bytes, prune_n_m, prune_unstructured, two_four_bytes
from mlsys_lab.validation import relative_error


def test_two_four_pattern_and_unstructured_sparsity():
    w = np.array([[4.0, -1.0, 3.0, 0.5, 1.0, 2.0, -3.0, 0.1]])
    np.testing.assert_array_equal(prune_n_m(w), [[4.0, 0, 3.0, 0, 0, 2.0, -3.0, 0]])
    big = np.random.default_rng(4).standard_normal((32, 64))
    pruned = prune_n_m(big)
    assert (np.count_nonzero(pruned.reshape(32, -1, 4), axis=2) == 2).all()
    unstructured = prune_unstructured(big, 0.5)
    assert np.count_nonzero(unstructured) == big.size // 2
    # at equal sparsity magnitude pruning anywhere loses less than 2 of every 4
    assert relative_error(unstructured, big) < relative_error(pruned, big)


def test_sparse_storage_sizes():
    w = np.zeros((4, 8))
    w[0, :4] = 1.0
    assert csr_bytes(w, 2, 4) == 4 * 6 + 5 * 4
    assert two_four_bytes((4, 8), 2) == 16 * 2 + 16 * 2 / 8
    assert dense_bytes((4, 8), 2) == 64
    with pytest.raises(ValueError, match="divisible by 4"):
        two_four_bytes((4, 6))
