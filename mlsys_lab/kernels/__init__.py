"""CUDA kernels of the course: ``*.cu`` sources in this folder, with Python launchers beside them.

Each launcher module (``memory.py``, ``matmul.py``, ...) loads its source through :mod:`.loader`,
checks its arguments, and has a NumPy reference that computes the same result, so that a lesson runs
the reference on a CPU and the kernel on a GPU. Importing this package never imports CuPy.
"""
