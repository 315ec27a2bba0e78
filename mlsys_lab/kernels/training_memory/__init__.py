"""Lesson 06's kernels: the int8 weight-only matmul.


"""
