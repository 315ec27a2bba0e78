"""CUDA kernels of the course, one folder per lesson: ``kernels/<slug>/*.cu`` and their Python launchers.

Each launcher module (``memory_hierarchy/fused.py``, ``loops/launchers.py``, ...) loads its source through
:mod:`.loader` (``loader.kernel("<slug>/<name>.cu", "<kernel>")``), checks its arguments, and has a NumPy
reference that computes the same result, so that a lesson runs the reference on a CPU and the kernel on
a GPU. Launchers import only the shared floor, never a lesson package. Importing this package never
imports CuPy; CI compile-checks every ``.cu`` file with ``nvcc``.
"""
