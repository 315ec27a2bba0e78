"""Is the course installable the same way everywhere, and are its notebooks committed as tests?"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pins import environment_pins, pyproject_pins

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_environment_yml_pins_the_same_set_as_pyproject():
    from_pyproject = pyproject_pins()
    assert environment_pins() == from_pyproject
    assert all(from_pyproject.values()), "every dependency is pinned"


def test_binder_uses_the_same_environment():
    """With a binder/ folder, Binder ignores the top-level environment.yml: the two must be identical.

    (A real copy, not a symlink: repo2docker copies binder/environment.yml alone into the image first.)
    """
    binder_env = ROOT / "binder" / "environment.yml"
    assert not binder_env.is_symlink()
    assert binder_env.read_text() == (ROOT / "environment.yml").read_text()
    assert os.access(ROOT / "binder" / "postBuild", os.X_OK)


def _cells(path):
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def _source(cell):
    return "".join(cell["source"])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_executed_without_errors(path):
    cells = [c for c in _cells(path) if _source(c).strip()]
    assert cells, "a lesson has code"
    # The Colab setup cell (mlsys_lab.course.colab) is stored unexecuted and without outputs, by design.
    colab_setup = [i for i, c in enumerate(cells) if c["metadata"].get("mlsys_lab", {}).get("role") == "colab-setup"]
    assert all(not cells[i]["outputs"] for i in colab_setup), "the Colab setup cell is stored without outputs"
    unrun = [i for i, c in enumerate(cells) if c["execution_count"] is None and i not in colab_setup]
    assert not unrun, f"code cells {unrun} were never executed: run `make execute NB={path.relative_to(ROOT)}`"
    assert any(c["outputs"] for c in cells), "no stored outputs: nbval would compare nothing"
    errors = [i for i, c in enumerate(cells) if any(o["output_type"] == "error" for o in c["outputs"])]
    assert not errors, f"code cells {errors} were stored with an error"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_compares_what_carries_meaning(path):
    """Lax nbval compares only marked cells: every check cell is marked, and every lesson marks some."""
    sources = [_source(c) for c in _cells(path)]
    checked = [s for s in sources if s.lstrip().startswith("# NBVAL_CHECK_OUTPUT")]
    assert checked, "no cell is marked # NBVAL_CHECK_OUTPUT: nbval would only execute this notebook"
    for s in sources:
        if re.search(r"^check_\w+\(", s, re.MULTILINE):
            assert s.lstrip().startswith("# NBVAL_CHECK_OUTPUT"), f"check cell is not compared:\n{s}"


def test_model_modules_import_without_widgets_or_plotting():
    """Everything outside mlsys_lab.widgets imports with ipywidgets and matplotlib hidden."""
    code = r"""
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('ipywidgets', 'matplotlib'):
            raise ImportError(f'{name} is hidden for this test')
sys.meta_path.insert(0, Block())
import mlsys_lab
bad = []
for info in pkgutil.walk_packages(mlsys_lab.__path__, 'mlsys_lab.'):
    if info.name.startswith('mlsys_lab.widgets'):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:
        bad.append(f'{info.name}: {exc}')
print('\n'.join(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "MLSYS_LAB_BACKEND": "numpy"}).stdout
    assert out.strip() == ""


CU_FILES = sorted((ROOT / "mlsys_lab" / "kernels").glob("*/*.cu"))
# The GPUs the course compiles for: Turing (Colab's T4), Ampere (A100), Ada (L4), Hopper (H100/H200).
COURSE_ARCHS = ((7, 5), (8, 0), (8, 9), (9, 0))


def _nvcc():
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        if os.environ.get("CI"):
            pytest.fail("nvcc is missing on CI: kernels must be compile-checked there")
        pytest.skip("nvcc not found: install the CUDA toolkit to compile-check kernels")
    return nvcc


@pytest.mark.parametrize("path", CU_FILES, ids=lambda p: p.name)
def test_cuda_kernel_compiles_for_every_course_gpu(path, tmp_path):
    """Does each kernel assemble (ptxas, not only PTX) for every GPU of the course it claims to run on, and fail,
    for the reason it states, on the ones backend.KERNEL_NEEDS says it cannot? One nvcc run per kernel: the source
    goes through the front end once (for the oldest architecture it supports) and ptxas makes each SASS target;
    architecture-specific builds (wgmma's sm_90a) get their own target."""
    from mlsys_lab import backend

    nvcc = _nvcc()
    name = path.relative_to(ROOT / "mlsys_lab" / "kernels").as_posix()
    least, what = backend.KERNEL_NEEDS.get(name, (COURSE_ARCHS[0], ""))
    supported = [f"{a}{b}" for a, b in COURSE_ARCHS if (a, b) >= least]
    gencode = ["-gencode", f"arch=compute_{supported[0]},code=[{','.join(f'sm_{a}' for a in supported)}]"]
    for file_name, _, arch in backend.ARCH_SPECIFIC_KERNELS:
        if file_name == name:
            gencode += ["-gencode", f"arch=compute_{arch[3:]},code=sm_{arch[3:]}"]
    result = subprocess.run([nvcc, "-std=c++17", "--fatbin", "--threads", "2", *gencode, "-o",
                             str(tmp_path / "k.fatbin"), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    older = [f"{a}{b}" for a, b in COURSE_ARCHS if (a, b) < least]
    if older:  # the table's claim, proved: the newest GPU it excludes cannot assemble it, for want of that feature
        refused = subprocess.run([nvcc, "-std=c++17", "-cubin", f"-arch=sm_{older[-1]}", "-o",
                                  str(tmp_path / "old.cubin"), str(path)], capture_output=True, text=True)
        assert refused.returncode != 0, f"{name} assembles for sm_{older[-1]}: backend.KERNEL_NEEDS is too strict"
        assert f"requires .target sm_{least[0]}{least[1]} or higher" in refused.stderr, refused.stderr[-2000:]
        assert what


def test_code_is_ruff_clean():
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        pytest.skip("ruff is not installed (it is in the test extras)")
    result = subprocess.run([str(ruff), "check", "--output-format", "concise", str(ROOT)], capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
