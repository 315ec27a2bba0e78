"""Lesson 02's kernels: loop-order and tiled matmul and stencil kernels, and the tunable space lesson 05 searches.

* :mod:`.launchers`: Launchers for ``loops/matmul.cu`` and ``loops/stencil.cu``: loop transformations run on a GPU.
"""
