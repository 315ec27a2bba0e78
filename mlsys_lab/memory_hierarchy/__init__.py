"""Lesson 04, the GPU memory hierarchy: a warp-level model of global and shared memory accesses.

* :mod:`.simt`: Warp-level memory-access analysis, without a GPU: coalescing and shared-memory bank conflicts.
"""
