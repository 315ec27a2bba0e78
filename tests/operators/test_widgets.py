"""Do lesson 01's explorers read out the library's numbers and count the kernels each pass leaves?"""

from mlsys_lab.widgets.operators import OperatorExplorer, PassExplorer


def test_operator_explorer_reads_out_the_library_numbers():
    explorer = OperatorExplorer()
    explorer.set(op_name="matmul", size=1024, dtype="fp32", hardware="NVIDIA H200 SXM")
    assert explorer.error is None
    assert explorer.readout["intensity"] == "171 FLOP/B" and explorer.readout["bound"] == "compute-bound"
    explorer.set(op_name="relu")
    assert explorer.readout["class"] == "elementwise" and explorer.readout["bound"] == "memory-bound"


def test_operator_explorer_shows_a_bad_dtype_in_place():
    explorer = OperatorExplorer()
    explorer.set(dtype="bf16", hardware="Generic 8-core AVX2 CPU")
    assert explorer.error == "dtype must be one of fp64, fp32 on Generic 8-core AVX2 CPU; got 'bf16'"
    explorer.set(dtype="fp32")
    assert explorer.error is None


def test_pass_explorer_counts_kernels_with_passes_on_and_off():
    explorer = PassExplorer()
    assert explorer.readout["before: kernels"] == "6" and explorer.readout["after: kernels"] == "1"
    explorer.set(program="elementwise chain", fuse_elementwise=False)
    assert explorer.readout["after: kernels"] == "5"
    explorer.set(fuse_elementwise=True)
    assert explorer.readout["after: kernels"] == "1"
