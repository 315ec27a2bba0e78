"""Lesson 03's kernels: the Little's-law bandwidth sweep.

* :mod:`.littles_law`: Launchers for the Little's-law microbenchmarks in ``roofline/littles_law.cu``.
"""
