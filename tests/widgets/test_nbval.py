"""Do explorers stay safe under nbval, and is the pitfall they avoid real?

nbval collects every message the kernel sends while a cell runs. Output printed by a widget callback
inside an ``ipywidgets.Output`` context is stored by the notebook executor in the *widget's* state,
but nbval reads it as the *cell's* stdout; a compared cell that moves such a widget then fails, or
passes only while the callback happens to print the same thing. Explorers therefore never print: they
write their numbers into an HTML readout and their plot into an Image.
"""

import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

EXPLORER_NOTEBOOK = [
    "# NBVAL_IGNORE_OUTPUT\nfrom mlsys_lab.widgets.start_here import TransferExplorer\nex = TransferExplorer()\nex",
    "# NBVAL_CHECK_OUTPUT\nex.set(n_params=13e9, dtype='fp16')\n"
    "ex.controls['hardware'].value = 'NVIDIA A100 80GB SXM'\n"
    "print(ex.readout['size'], ex.readout['memory (HBM/DRAM)'])",
]

PRINTING_WIDGET_NOTEBOOK = [
    "# NBVAL_IGNORE_OUTPUT\nimport ipywidgets as w\nout = w.Output()\ns = w.IntSlider()\n"
    "def on_change(change):\n    with out:\n        print('callback saw', change['new'])\n"
    "s.observe(on_change, names='value')\nw.VBox([s, out])",
    "# NBVAL_CHECK_OUTPUT\ns.value = 7\nprint('cell done')",
]


def run_nbval(tmp_path, sources):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    path = tmp_path / "widgets.ipynb"
    nbformat.write(nb, path)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
                           "--nbval-current-env", str(path)], capture_output=True, text=True, cwd=tmp_path)


@pytest.mark.slow
def test_explorer_cells_pass_nbval_repeatedly(tmp_path):
    result = run_nbval(tmp_path, EXPLORER_NOTEBOOK)
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.slow
def test_prints_from_output_widget_callbacks_break_nbval(tmp_path):
    """The pitfall is real: the stored cell shows only 'cell done', nbval also sees the callback's print."""
    result = run_nbval(tmp_path, PRINTING_WIDGET_NOTEBOOK)
    assert result.returncode != 0
    assert "callback saw 7" in result.stdout
