"""Lesson 01's kernels: a fused row-wise attention (CUDA), with a numba CPU version, and a fused elementwise chain.

* :mod:`.attention`: Fused attention: softmax(q·kᵀ·scale [+ causal mask])·v in one kernel, the S×S scores
  never in memory.
* :mod:`.bias_gelu`: scale · gelu(x + bias) in one grid-stride pass (``bias_gelu.cu``), the reference of the
  lesson's CUDA exercise, with its NumPy reference.
"""
