"""Lesson 04's kernels: global, shared, constant and local memory; fused elementwise/softmax/reduction; the
SGEMM ladder.

* :mod:`.sgemm`: Launchers for the SGEMM progression in ``memory_hierarchy/sgemm.cu``: C = A @ B in FP32, row-major.
* :mod:`.spaces`: Launchers for the memory-hierarchy kernels, each beside its NumPy reference.
"""
