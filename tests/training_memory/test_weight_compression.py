"""Lossless compression: exact round trips, the shuffle's gain on weight-like data, the break-even formula."""

import numpy as np
import pytest

from mlsys_lab.hardware import transfer_seconds
from mlsys_lab.training_memory.weight_compression import (
    break_even_bandwidth,
    compress,
    compressed_transfer_seconds,
    decompress,
    measure,
    shuffle_bytes,
    to_bfloat16_bits,
    unshuffle_bytes,
)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.uint16, np.float64])
@pytest.mark.parametrize("shuffle", [True, False])
def test_round_trip_is_exact(dtype, shuffle):
    a = (np.random.default_rng().standard_normal((37, 11)) * 0.02).astype(dtype)
    back = decompress(compress(a, shuffle), a.dtype, a.shape, shuffle)
    assert back.dtype == a.dtype and back.shape == a.shape
    assert back.tobytes() == a.tobytes()


def test_shuffle_groups_bytes_by_significance():
    a = np.array([0x0102, 0x0304], dtype="<u2")
    assert shuffle_bytes(a) == bytes([0x02, 0x04, 0x01, 0x03])
    np.testing.assert_array_equal(unshuffle_bytes(shuffle_bytes(a), a.dtype, a.shape), a)


def test_bfloat16_bits_are_the_rounded_high_half():
    x = np.array([1.0, -2.5, 3.14159265, 1.0 + 2**-8, 1.0 + 3 * 2**-9], dtype=np.float32)
    bits = to_bfloat16_bits(x)
    assert bits[0] == 0x3F80 and bits[1] == 0xC020 and bits[2] == 0x4049
    assert bits[3] == 0x3F80  # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1.0)
    assert bits[4] == 0x3F81  # 1 + 3·2^-9 is above the tie: rounds up


def test_weight_like_bf16_compresses_and_shuffling_helps():
    w = np.random.default_rng(0).standard_normal(1 << 18).astype(np.float32) * 0.02
    bf16 = to_bfloat16_bits(w)
    shuffled, plain = measure(bf16, shuffle=True), measure(bf16, shuffle=False)
    assert shuffled.ratio > plain.ratio and shuffled.ratio > 1.15
    noise = np.random.default_rng(1).integers(0, 2**16, 1 << 18, dtype=np.uint16)  # random bits: nothing to gain
    assert measure(noise).ratio < 1.01


def test_break_even_bandwidth_is_where_both_transfers_take_equally_long():
    assert break_even_bandwidth(2.0, 1e9) == 0.5e9  # hand-worked: D (1 - 1/r)
    assert break_even_bandwidth(0.9, 1e9) == 0.0
    b = break_even_bandwidth(1.3, 0.8e9)
    assert transfer_seconds(1e9, b) == pytest.approx(compressed_transfer_seconds(1e9, b, 1.3, 0.8e9))
    assert transfer_seconds(1e9, b / 2) > compressed_transfer_seconds(1e9, b / 2, 1.3, 0.8e9)  # slower link: pays


def test_compressed_transfer_by_hand():
    # 1 GB at ratio 2 over 1 GB/s: 0.5 s on the link, then 1 GB decompressed at 4 GB/s: 0.25 s
    assert compressed_transfer_seconds(1e9, 1e9, 2.0, 4e9) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s must be a number > 0"):
        compressed_transfer_seconds(1e9, 0, 2.0, 4e9)
