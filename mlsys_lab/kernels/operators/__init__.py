"""Lesson 01's kernels: a fused row-wise attention (CUDA), with a numba CPU version.

* :mod:`.attention`: Fused attention: softmax(q·kᵀ·scale [+ causal mask])·v in one kernel, the S×S scores
  never in memory.
"""
