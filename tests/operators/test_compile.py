"""Does a compiled plan compute what the interpreter computes, and recompile only when a shape changes?"""

from operators.programs import assert_close, attention, chain, mlp_block, randn

from mlsys_lab.operators import compile_function, compile_graph, run_eager, trace


def test_compiled_graph_equals_eager_on_mlp_and_attention_blocks():
    for fn, shapes in (
        (mlp_block, [(8, 16), (16, 32), (32,), (32, 16), (16,), (16,)]),
        (attention, [(2, 24, 16)] * 3),
    ):
        graph = trace(fn, *shapes)
        compiled = compile_graph(graph)
        args = tuple(randn(*s) for s in shapes)
        assert compiled.n_kernels < graph.n_kernels
        assert_close(compiled(*args), run_eager(graph, *args), rtol=1e-4, atol=1e-5)


def test_shape_guards_recompile_only_when_a_shape_changes():
    compiled = compile_function(chain)
    a, b, c = randn(4, 8), randn(4, 8), randn(8)
    assert_close(compiled(a, b, c), chain(a, b, c), rtol=1e-5)
    compiled(randn(4, 8), randn(4, 8), randn(8))
    assert compiled.compile_count == 1
    out = compiled(randn(6, 8), randn(6, 8), randn(8))
    assert out.shape == (6, 8) and compiled.compile_count == 2
    assert compiled.guards()[1] == "a.shape == (6, 8) and b.shape == (6, 8) and c.shape == (8,)"
