"""TMA tensor maps: what Hopper's copy engine needs to move a box of a 2-D array into shared memory.

A ``CUtensorMap`` is a 128-byte descriptor built on the host by the driver (``cuTensorMapEncodeTiled``): the
array's address, shape and row stride, the box a copy moves, and how the box lands in shared memory (here
always the 128-byte swizzle, the layout ``wgmma`` reads without bank conflicts). A kernel receives it as a
pointer to a device copy and names it in ``cp.async.bulk.tensor`` (``memory_hierarchy/hopper_ptx.cuh``).
"""

from __future__ import annotations

import ctypes

import numpy as np

from mlsys_lab import backend

_TMAPS: dict[tuple, object] = {}
# CUtensorMapDataType by item size: 1 byte (FP8 codes, read as uint8), 2 bytes (bf16 bits)
_DATA_TYPES = {1: 0, 2: 9}
_CU_TENSOR_MAP_SWIZZLE_128B, _CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 3, 2
SWIZZLE_BYTES = 128  # a box row may be at most this wide with the 128-byte swizzle


def tensor_map(array, box_rows: int, box_cols: int | None = None):
    """A device copy of the ``CUtensorMap`` that lets TMA copy (box_rows x box_cols) boxes of the row-major
    2-D ``array`` (1- or 2-byte items) into shared memory with the 128-byte swizzle. ``box_cols`` defaults to
    one 128-byte row (64 bf16, 128 FP8).

    The map holds only the address, shape, strides and box, so it is cached by those.
    """
    rows, cols = array.shape
    item = array.dtype.itemsize
    if item not in _DATA_TYPES:
        raise ValueError(f"array must hold 1- or 2-byte items for a tensor map; got item size {item}")
    box_cols = SWIZZLE_BYTES // item if box_cols is None else box_cols
    if not 1 <= box_rows <= 256 or box_cols * item > SWIZZLE_BYTES:
        raise ValueError(f"box must be at most 256 rows of {SWIZZLE_BYTES} bytes; got {box_rows} x {box_cols} "
                         f"items of {item} bytes")
    key = (array.data.ptr, rows, cols, item, box_rows, box_cols)
    if key in _TMAPS:
        return _TMAPS[key]
    if len(_TMAPS) > 4096:  # fresh arrays in a long loop: forget the old maps (re-encoding is cheap)
        _TMAPS.clear()
    encode = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
    encode.restype = ctypes.c_int
    storage = ctypes.create_string_buffer(128 + 64)
    address = (ctypes.addressof(storage) + 63) & ~63  # CUtensorMap is 64-byte aligned
    u64x2, u32x2 = ctypes.c_uint64 * 2, ctypes.c_uint32 * 2
    status = encode(ctypes.c_void_p(address), _DATA_TYPES[item], ctypes.c_uint32(2),
                    ctypes.c_void_p(array.data.ptr), u64x2(cols, rows), (ctypes.c_uint64 * 1)(cols * item),
                    u32x2(box_cols, box_rows), u32x2(1, 1), 0, _CU_TENSOR_MAP_SWIZZLE_128B,
                    _CU_TENSOR_MAP_L2_PROMOTION_L2_128B, 0)
    if status != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed with CUresult {status} for shape {array.shape}")
    host = np.frombuffer(ctypes.string_at(address, 128), dtype=np.uint8)
    _TMAPS[key] = device = backend.xp.asarray(host)
    return device
