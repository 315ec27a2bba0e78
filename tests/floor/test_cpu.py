"""Does use_one_blas_thread set the thread count before NumPy loads, and say when it is too late?"""

import os
import subprocess
import sys


def run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout


def test_one_thread_before_numpy_loads():
    out = run("from mlsys_lab.cpu import use_one_blas_thread\n"
              "print(use_one_blas_thread())\n"
              "import os; print(os.environ['OPENBLAS_NUM_THREADS'], os.environ['OMP_NUM_THREADS'])")
    assert out.split() == ["True", "1", "1"]


def test_too_late_once_numpy_is_loaded():
    out = run("import numpy\nfrom mlsys_lab.cpu import use_one_blas_thread\nprint(use_one_blas_thread())")
    assert out.strip() == "False"


def test_a_count_the_user_set_is_kept():
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", "from mlsys_lab.cpu import use_one_blas_thread\n"
                          "use_one_blas_thread(); import os; print(os.environ['OPENBLAS_NUM_THREADS'])"],
                         capture_output=True, text=True, check=True, env=env).stdout
    assert out.strip() == "2"
