"""Lesson 06's kernels: the int8 weight-only matmul.

* :mod:`.int8_matmul`: Launcher for the weight-only int8 matmul in ``training_memory/int8_matmul.cu``, and its
  NumPy reference.
* :mod:`.softmax_xent`: Launcher for the fused softmax cross-entropy (forward and backward in one kernel, one block
  per row, online max and sum) in ``training_memory/softmax_xent.cu``, its NumPy reference and its byte counts.
"""
