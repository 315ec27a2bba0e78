"""Lesson 06's kernels: the int8 weight-only matmul.

* :mod:`.int8_matmul`: Launcher for the weight-only int8 matmul in ``training_memory/int8_matmul.cu``, and its
  NumPy reference.
"""
