"""Graph execution: optimise once, then run a fixed plan; recompile when a guard fails.

``compile_graph`` runs the pass pipeline and turns the graph into a static plan: a list of
(kernel, input slots, output slot, slots to free) decided ahead of time, so a call does no name lookups,
no scheduling decisions and no shape inference (静态调度, the opposite of the eager interpreter).

``compile_function`` is the torch.compile of this course: the first call with given input shapes traces the
function, compiles it and caches the plan under a guard ``x.shape == (...) and ...``; a call whose
shapes fail every guard compiles again (TorchDynamo's guards; Ansel et al., ASPLOS 2024).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from mlsys_lab.operators import passes as graph_passes
from mlsys_lab.operators.eager import IMPLEMENTATIONS, check_inputs
from mlsys_lab.operators.ir import Graph, trace
from mlsys_lab.validation import check_int, check_sequence, check_type


@dataclass
class CompiledGraph:
    """A graph after the passes, with its static execution plan."""

    graph: Graph
    steps: list[tuple[Callable, tuple[int, ...], int, dict, tuple[int, ...]]] = field(default_factory=list)
    n_slots: int = 0
    output_slots: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_type("graph", self.graph, Graph)
        if not all(isinstance(step, tuple) and len(step) == 5 for step in check_sequence("steps", self.steps)):
            raise TypeError("steps must be a list of (kernel, input slots, output slot, attrs, freed slots) tuples")
        check_int("n_slots", self.n_slots, low=0)
        for slot in check_sequence("output_slots", self.output_slots):
            check_int("output_slots", slot, low=0, high=max(self.n_slots - 1, 0))

    def __call__(self, *arrays: Any) -> Any:
        check_inputs(self.graph, arrays)
        return self.run_unchecked(*arrays)

    def run_unchecked(self, *arrays: Any) -> Any:
        """Run the plan without checking shapes (the guard has done it)."""
        slots: list[Any] = [None] * self.n_slots
        slots[: len(arrays)] = arrays
        for impl, ins, out, attrs, frees in self.steps:
            slots[out] = impl([slots[i] for i in ins], attrs)
            for i in frees:
                slots[i] = None
        results = tuple(slots[i] for i in self.output_slots)
        return results if len(results) > 1 else results[0]

    @property
    def n_kernels(self) -> int:
        return self.graph.n_kernels


def build_plan(graph: Graph) -> CompiledGraph:
    """Give every tensor a slot and list the steps; a slot is emptied after its last reader."""
    check_type("graph", graph, Graph)
    slot = {name: i for i, name in enumerate(graph.inputs)}
    for node in graph.nodes:
        if node.name not in slot:
            slot[node.name] = len(slot)
    consts = {n.name: n.attrs["value"] for n in graph.nodes if n.op == "const"}
    last_reader: dict[str, str] = {}
    for node in graph.nodes:
        for name in node.inputs:
            last_reader[name] = node.name
    keep = set(graph.inputs) | set(graph.outputs)
    compiled = CompiledGraph(graph, n_slots=len(slot), output_slots=tuple(slot[o] for o in graph.outputs))
    const_steps = [
        (lambda v, a: a["value"], (), slot[name], {"value": value}, ()) for name, value in consts.items()
    ]
    compiled.steps.extend(const_steps)
    for node in graph.nodes:
        if node.op in ("input", "const"):
            continue
        frees = tuple(
            slot[name]
            for name in dict.fromkeys(node.inputs)
            if last_reader[name] == node.name and name not in keep and name not in consts
        )
        compiled.steps.append(
            (
                IMPLEMENTATIONS[node.op],
                tuple(slot[i] for i in node.inputs),
                slot[node.name],
                node.attrs,
                frees,
            )
        )
    return compiled


def compile_graph(
    graph: Graph, passes: Sequence[Callable[[Graph], Graph]] = graph_passes.PIPELINE
) -> CompiledGraph:
    """Apply ``passes`` in order (default: replacement, dead code, fusion, reordering) and build the plan."""
    check_type("graph", graph, Graph)
    if not all(callable(graph_pass) for graph_pass in check_sequence("passes", passes)):
        raise TypeError("passes must be a sequence of functions Graph -> Graph")
    for graph_pass in passes:
        graph = graph_pass(graph)
    return build_plan(graph)


class CompiledFunction:
    """``fn`` compiled per input signature; ``compile_count`` says how often it has compiled."""

    def __init__(self, fn: Callable[..., Any], passes: Sequence[Callable[[Graph], Graph]]) -> None:
        self.fn, self.passes = fn, tuple(passes)
        self.cache: dict[tuple, CompiledGraph] = {}
        self.compile_count = 0

    @staticmethod
    def signature(arrays: tuple) -> tuple:
        return tuple((tuple(a.shape), str(a.dtype)) for a in arrays)

    def guards(self) -> list[str]:
        """One guard per cached plan, as torch.compile prints them."""
        names = list(self.fn.__code__.co_varnames[: self.fn.__code__.co_argcount])
        guards = []
        for key in self.cache:
            checks = [f"{n}.shape == {shape}" for n, (shape, _) in zip(names, key, strict=True)]
            guards.append(" and ".join(checks))
        return guards

    def __call__(self, *arrays: Any) -> Any:
        key = self.signature(arrays)
        plan = self.cache.get(key)
        if plan is None:  # every guard failed: trace and compile for these shapes
            graph = trace(self.fn, *(shape for shape, _ in key), dtype=key[0][1] if key else "float32")
            plan = self.cache[key] = compile_graph(graph, self.passes)
            self.compile_count += 1
        return plan.run_unchecked(*arrays)


def compile_function(
    fn: Callable[..., Any], passes: Sequence[Callable[[Graph], Graph]] = graph_passes.PIPELINE
) -> CompiledFunction:
    """Compile ``fn`` lazily: trace + passes + plan on the first call of each input signature."""
    if not callable(fn):
        raise TypeError(f"fn must be a callable (the function to compile); got {type(fn).__name__} {fn!r:.40}")
    for p in check_sequence("passes", passes):
        if not callable(p):
            raise TypeError(f"passes must hold callables Graph -> Graph; got {p!r:.40}")
    return CompiledFunction(fn, passes)
