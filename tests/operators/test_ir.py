"""Does tracing record one node per operator, with shapes, and lay the graph out by depth?"""

import pytest
from operators.programs import chain

from mlsys_lab.operators import layout, trace


def test_trace_records_one_node_per_operator_with_shapes():
    graph = trace(chain, (4, 8), (4, 8), (8,))
    ops = [n.op for n in graph.nodes]
    assert ops == ["input", "input", "input", "mul", "add", "tanh", "const", "mul", "const", "add"]
    assert graph.node(graph.outputs[0]).shape == (4, 8)
    assert graph.n_kernels == 5


def test_trace_rejects_bad_shapes():
    with pytest.raises(ValueError, match="matmul needs"):
        trace(lambda a, b: a @ b, (2, 3), (4, 5))
    with pytest.raises(ValueError, match="one shape per parameter"):
        trace(chain, (2, 3))


def test_layout_gives_every_tensor_a_position_by_depth():
    graph = trace(chain, (4, 8), (4, 8), (8,))
    positions = layout(graph)
    assert positions["t0"][1] == 0 and positions[graph.outputs[0]][1] == -5
    assert "t6" not in positions  # constants are drawn inside their user
