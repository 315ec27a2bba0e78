"""Lossless compression of weights and messages (无损压缩): fewer bytes to move, time spent to decompress.

Floating-point weights are not random bytes. A trained weight is near zero and roughly Gaussian, so the
sign-and-exponent byte of each number takes few distinct values while the low mantissa bits look random.
General-purpose compressors (zlib here) see the bytes interleaved and gain little; **byte shuffling**
(Blosc's shuffle filter) first groups byte 0 of every number, then byte 1, and so on, so the predictable
high bytes sit together and compress well. ZipNN (Hershcovitch et al. 2024) and DFloat11 (Zhang et al. 2025)
build on the same observation: the exponent is where bf16 weights are compressible.

Whether compression pays is a race. Sending n bytes over a link of bandwidth B takes n / B; compressed,
it takes n / (r B) + n / D, with r the ratio and D the decompression throughput (bytes out per second).
It pays exactly when B < D (1 - 1/r) (:func:`break_even_bandwidth`): slow links (object storage,
networks), not HBM, NVLink or PCIe, unless the decompressor itself runs at those speeds (on the GPU).
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass

import numpy as np

from mlsys_lab.validation import (
    check_array,
    check_bool,
    check_finite,
    check_int,
    check_number,
    check_sequence,
    check_type,
)


def to_bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 as uint16 bit patterns: the high half of each float32 (round-to-nearest-even)."""
    check_array("x", x, min_size=0)
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def shuffle_bytes(a: np.ndarray) -> bytes:
    """The bytes of ``a`` grouped by significance: byte 0 of every element, then byte 1, ..."""
    check_array("a", a, kinds="fiub", min_size=0)  # numbers, not Python objects (they have no bytes)
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(-1, a.itemsize).T.tobytes()


def _check_buffer(name, data, dtype, shape) -> None:
    """``dtype`` a NumPy dtype, ``shape`` a tuple of sizes >= 0, ``data`` (unless ``name`` is None) bytes of that
    many elements."""
    if dtype is None:  # np.dtype(None) is float64: a missing dtype would pass unseen
        raise TypeError("dtype must be a NumPy dtype; got None")
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError as error:
        raise TypeError(f"dtype must be a NumPy dtype; got {dtype!r:.40}") from error
    if isinstance(dtype, (int, float)) or np.dtype(dtype).kind not in "fiub":
        raise TypeError(f"dtype must be a NumPy number dtype; got {dtype!r:.40}")
    sizes = [check_int("shape", s, low=0) for s in check_sequence("shape", shape)]
    if name is not None:
        check_type(name, data, (bytes, bytearray, memoryview))
        if len(data) != itemsize * int(np.prod(sizes, dtype=np.int64)):
            raise ValueError(f"{name} must hold {itemsize * int(np.prod(sizes, dtype=np.int64))} bytes for shape "
                             f"{tuple(sizes)} of {np.dtype(dtype)}; got {len(data)}")


def unshuffle_bytes(data: bytes, dtype, shape) -> np.ndarray:
    """Inverse of :func:`shuffle_bytes`."""
    _check_buffer("data", data, dtype, shape)
    dtype = np.dtype(dtype)
    planes = np.frombuffer(data, dtype=np.uint8).reshape(dtype.itemsize, -1)
    return np.ascontiguousarray(planes.T).view(dtype).reshape(shape)


def compress(a: np.ndarray, shuffle: bool = True, level: int = 1) -> bytes:
    """zlib-compress the array's bytes, byte-shuffled first when ``shuffle``."""
    check_int("level", level, low=0, high=9)
    check_array("a", a, kinds="fiub", min_size=0)
    check_bool("shuffle", shuffle)
    raw = shuffle_bytes(a) if shuffle else np.ascontiguousarray(a).tobytes()
    return zlib.compress(raw, level)


def decompress(blob: bytes, dtype, shape, shuffle: bool = True) -> np.ndarray:
    """Inverse of :func:`compress`: the identical array, bit for bit."""
    check_type("blob", blob, (bytes, bytearray))
    _check_buffer(None, None, dtype, shape)
    check_bool("shuffle", shuffle)
    raw = zlib.decompress(blob)
    if shuffle:
        return unshuffle_bytes(raw, dtype, shape)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


@dataclass(frozen=True)
class CompressionRun:
    """One array through :func:`compress` and :func:`decompress`, checked and timed (seconds: medians)."""

    n_bytes: int
    compressed_bytes: int
    compress_seconds: float
    decompress_seconds: float

    def __post_init__(self) -> None:
        check_int("n_bytes", self.n_bytes, low=0)
        check_int("compressed_bytes", self.compressed_bytes, low=1)  # zlib's header alone is bytes
        check_finite("compress_seconds", self.compress_seconds, low=0.0)
        check_finite("decompress_seconds", self.decompress_seconds, low=0.0)

    @property
    def ratio(self) -> float:
        return self.n_bytes / self.compressed_bytes

    @property
    def decompress_bytes_per_s(self) -> float:
        return self.n_bytes / self.decompress_seconds


def measure(a: np.ndarray, shuffle: bool = True, level: int = 1, repeat: int = 3) -> CompressionRun:
    """Compress and decompress ``a`` ``repeat`` times; check the round trip is exact; median times."""
    check_int("repeat", repeat, low=1, high=1000)
    a = check_array("a", a, kinds="fiub", min_size=0)
    check_bool("shuffle", shuffle)
    c_times, d_times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        blob = compress(a, shuffle, level)
        c_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        back = decompress(blob, a.dtype, a.shape, shuffle)
        d_times.append(time.perf_counter() - start)
    if not np.array_equal(back.view(np.uint8), np.ascontiguousarray(a).view(np.uint8)):
        raise AssertionError("lossless round trip changed the data")
    return CompressionRun(a.nbytes, len(blob), float(np.median(c_times)), float(np.median(d_times)))


def break_even_bandwidth(ratio: float, decompress_bytes_per_s: float) -> float:
    """Link bandwidth below which compressing pays: D (1 - 1/r). Ratio <= 1 never pays (returns 0)."""
    check_number("ratio", ratio, low=0, low_inclusive=False)
    check_number("decompress_bytes_per_s", decompress_bytes_per_s, low=0, low_inclusive=False)
    return max(0.0, decompress_bytes_per_s * (1.0 - 1.0 / ratio))


def compressed_transfer_seconds(n_bytes: float, bandwidth_bytes_per_s: float, ratio: float,
                                decompress_bytes_per_s: float) -> float:
    """Time to move ``n_bytes`` compressed ``ratio`` times over a link, then decompress: n / (r B) + n / D.

    Sent raw it is n / B, :func:`mlsys_lab.hardware.transfer_seconds`; compression pays when this is less.
    """
    check_finite("n_bytes", n_bytes, low=0)
    check_number("bandwidth_bytes_per_s", bandwidth_bytes_per_s, low=0, low_inclusive=False)
    check_number("ratio", ratio, low=0, low_inclusive=False)
    check_number("decompress_bytes_per_s", decompress_bytes_per_s, low=0, low_inclusive=False)
    return n_bytes / (ratio * bandwidth_bytes_per_s) + n_bytes / decompress_bytes_per_s
