"""CPU settings a lesson makes before NumPy loads. This module imports nothing heavy.

On a small shared CPU (a 2-core laptop, a classroom VM, CI), BLAS threads that wait for each other
turn step times into noise: the small models of lessons 06, 09, 10 and 11 ran ten times slower with
two OpenBLAS threads on a busy 2-core machine than with one. One thread also makes float sums
bitwise reproducible from run to run, which lesson 09's resume-after-a-crash test relies on.

    from mlsys_lab.cpu import use_one_blas_thread
    use_one_blas_thread()        # first, before numpy is imported
    import numpy as np
"""

from __future__ import annotations

import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def use_one_blas_thread() -> bool:
    """Ask the BLAS library for one thread (unless the user set a count); True if NumPy was not loaded yet.

    BLAS reads these variables once, when NumPy first loads it: called after that, the setting only
    reaches processes started later, and the function returns False.
    """
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    return "numpy" not in sys.modules
