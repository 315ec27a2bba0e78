"""A valid call of each public function: from the table below, from defaults, or built from names and type hints.

The builder tries a few *combinations* of example values (all sizes small, all 4, all 8, ...) chosen from each
parameter's annotation and name, and keeps the first that returns within the time limit. A function none of
them satisfies counts as not covered; give it an entry in :data:`TABLE` to cover it.
"""

from __future__ import annotations

import ast
import copy
import inspect
import re
import textwrap
import typing

import numpy as np
from fuzz.harness import hints_of, parameters, timed_call

COMBINATIONS = 6
BASELINE_LIMIT_S = 10.0  # the first call may compile (numba) or load records
_SMALL = re.compile(r"(^|_)(tp|pp|dp|ep|sp|cp|k|top_k|degree|stages?|ranks?|world|gpus?|nodes?|groups?|experts?|"
                    r"ways?|heads?|workers?|replicas?|rank|shards?|bits|micro\w*|n_\w+)($|_)")
_FRACTION = re.compile(r"fraction|prob|rate|ratio|dropout|efficiency|alpha|beta|momentum|p$|factor|overlap|sparsity")
_ARRAY = re.compile(r"^(x|y|a|b|w|v|q|k_?|grads?|gradient|weights?|logits|scores|values|tokens|data|array|arr|"
                    r"matrix|m|u|inputs?|targets?|labels|params|dy|dx|out)$")


def _table() -> dict[str, typing.Callable[[], dict]]:
    """Hand-written baselines for what the builder cannot guess."""
    routed = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [1, 3]])  # (T=6, k=2) expert indices of 4
    gates = np.full((6, 2), 0.5)
    return {
        "mlsys_lab.moe.gating.load_balancing_loss": lambda: dict(
            router_probs=np.full((8, 4), 0.25), expert_indices=np.arange(8) % 4),
        "mlsys_lab.moe.gating.load_balancing_grad": lambda: dict(
            router_probs=np.full((8, 4), 0.25), expert_indices=np.arange(8) % 4),
        # capacity 2 drops one pair, so the baseline's slots hold the documented -1 (dropped) too
        "mlsys_lab.moe.gating.assign_with_capacity": lambda: dict(indices=routed, n_experts=4, capacity=2),
        "mlsys_lab.moe.gating.drop_fraction": lambda: dict(indices=routed, n_experts=4, capacity_factor=1.0),
        "mlsys_lab.moe.gating.expert_fractions": lambda: dict(expert_indices=routed, n_experts=4),
        "mlsys_lab.moe.gating.gates_dense": lambda: dict(indices=routed, weights=gates, n_experts=4),
        "mlsys_lab.moe.gating.gshard_second_expert_mask": lambda: dict(weights=gates, rng=np.random.default_rng(0)),
        "mlsys_lab.hardware.Hardware": lambda: dict(name="toy", peak_flop_per_s={"fp32": 1e12},
                                                    memory_bandwidth_bytes_per_s=1e11, memory_bytes=1e9),
        "mlsys_lab.hardware.preset": lambda: dict(name="H200"),
        # bf16 patterns are arrays of uint16 (the builder would guess an int from the name "bits")
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.from_bf16_bits": lambda: dict(
            bits=np.array([0x3F80, 0xC000, 0x0000, 0x4049], dtype=np.uint16)),
        # DeepSeek-V3's selection bias has either sign (it only ranks experts): a baseline with negative entries,
        # so that a negative bias coming back is not judged a silent negative result
        "mlsys_lab.moe.balancing.update_bias": lambda: dict(bias=np.array([-0.5, 0.0, 0.25, 1.0]),
                                                            load=np.array([5.0, 1.0, 3.0, 3.0]), speed=0.01),
    }


def _typed_table() -> dict[str, typing.Callable[[], dict]]:
    """Baselines of targets whose argument checks reject the builder's guesses (float arrays for bf16 bit
    patterns, an int for a tuple of boxes): without them these targets would silently drop out of the suite."""
    from mlsys_lab.hardware import H200
    from mlsys_lab.kernels.roofline.littles_law import chase_order
    from mlsys_lab.memory_hierarchy.simt import SPACES
    from mlsys_lab.operators.cost import matmul_cost

    rng = np.random.default_rng(0)

    def bits(*shape):  # bf16 patterns of small normal numbers
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

    qkv = lambda: dict(q=bits(1, 2, 8, 16), k=bits(1, 2, 8, 16), v=bits(1, 2, 8, 16), causal=False)  # noqa: E731
    return {
        # a 64 KiB copy (the default 64 MiB makes every call ~0.1 s, and the target's budget runs out)
        "mlsys_lab.collectives.datapaths.measure_host_copy": lambda: dict(n_bytes=2**16),
        "mlsys_lab.nn.accuracy": lambda: dict(logits=np.eye(4)[[0, 1, 2, 3, 0]], labels=np.array([0, 1, 2, 3, 1])),
        "mlsys_lab.nn.mse_loss": lambda: dict(prediction=np.linspace(-1, 1, 8), target=np.zeros(8)),
        # a short job (four intervals, failures rare): every call takes milliseconds, so no call is skipped
        "mlsys_lab.fault_tolerance.simulate.timeline": lambda: dict(
            work_seconds=40.0, interval=10.0, checkpoint_seconds=1.0, restart_seconds=2.0, mttf_seconds=1e4),
        "mlsys_lab.collectives.overlap.Timeline": lambda: dict(
            compute=((0.0, 1.0, 0),), comm=((0.5, 1.5, 1e6),), buckets=((0,),), backward_seconds=1.0,
            step_seconds=1.5),
        "mlsys_lab.collectives.topology.Topology": lambda: dict(
            name="ring", n_nodes=4, n_vertices=4, edges=((0, 1, 1.0), (1, 2, 1.0), (2, 3, 1.0), (3, 0, 1.0)),
            positions=np.zeros((4, 2))),
        "mlsys_lab.fault_tolerance.simulate.committed_work": lambda: dict(
            gaps=np.array([[100.0, 50.0, 200.0]]), interval=10.0, checkpoint_seconds=1.0, restart_seconds=2.0),
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.Bf16Step": lambda: dict(
            name="wmma", function="bf16_wmma", idea="toy", tile=(128, 128, 32), threads=256, dynamic_smem_bytes=0,
            smem_row_bytes=80, swizzled=False, grouped=False),
        "mlsys_lab.kernels.memory_hierarchy.bf16_gemm.gemm_reference": lambda: dict(a_bits=bits(4, 8),
                                                                                  b_bits=bits(3, 8)),
        "mlsys_lab.kernels.memory_hierarchy.flash_attention.attention_reference": qkv,
        "mlsys_lab.kernels.memory_hierarchy.flash_attention.attention_unfused": qkv,
        "mlsys_lab.kernels.roofline.littles_law.chase_reference": lambda: dict(nxt=chase_order(64), steps=10),
        "mlsys_lab.memory_hierarchy.simt.TransposeAccess": lambda: dict(store_words=np.arange(32),
                                                                        load_words=np.arange(32) * 33),
        "mlsys_lab.memory_hierarchy.simt.WarpAccess": lambda: dict(
            space=SPACES[0], slots=np.zeros(32, dtype=int), cost=4, best_cost=4, efficiency=1.0),
        "mlsys_lab.memory_hierarchy.simt.sgemm_naive_addresses": lambda: dict(k_index=0, n_k=64, n_cols=64,
                                                                              coalesced=False),
        # parameters, their gradients and Adam's first moment have either sign
        "mlsys_lab.parallelism.zero.adam": lambda: dict(theta=np.linspace(-1, 1, 8), grad=np.full(8, 0.1),
                                                        m=np.zeros(8), v=np.zeros(8), t=1, lr=1e-3),
        "mlsys_lab.roofline.littles_law.LittleSweep": lambda: dict(
            label="hbm", inflight=np.array([1.0, 2.0, 4.0]), throughput=np.array([1.0, 2.0, 3.0]), latency=1.0,
            peak=3.0, unit="B/s"),
        "mlsys_lab.roofline.model.RooflinePoint": lambda: dict(
            hardware=H200, dtype="fp32", cost=matmul_cost(8, 8, 8), attainable_flops=1e12, seconds=1e-6,
            bound="memory-bound"),
        # symmetric codes and asymmetric zero points are signed
        "mlsys_lab.training_memory.quantize.Quantized": lambda: dict(
            codes=np.arange(-16, 16, dtype=np.int16).reshape(4, 8), scales=np.ones((4, 1), dtype=np.float32),
            zero_points=np.full((4, 1), -3.0, dtype=np.float32), bits=8, group_size=8),
    }


TABLE = {**_table(), **_typed_table()}


def _literals(fn) -> list[str]:
    """String literals in a function's source: the choices a ``str`` parameter accepts, usually."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return []
    found = []
    module = inspect.getmodule(fn)
    for key, value in vars(module).items() if module else ():  # choice tuples: ALGORITHMS = ("ring", ...)
        strings = isinstance(value, (tuple, list, frozenset, dict)) and value and all(isinstance(v, str) for v in value)
        if strings and not key.startswith("_"):
            found.extend(value)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"[\w.+-]{1,24}",
                                                                                          node.value):
            found.append(node.value)
    return list(dict.fromkeys(found))


class Builder:
    """Finds and caches a baseline call per target; ``builder(qualified, target)`` -> (kwargs, result) or None."""

    def __init__(self):
        self.cache: dict[str, tuple[dict, object] | None] = {}
        self.instances: dict[object, object] = {}

    def __call__(self, qualified: str, target):
        if qualified not in self.cache:
            self.cache[qualified] = self._find(qualified, target)
        return self.cache[qualified]

    def _find(self, qualified: str, target):
        if qualified in TABLE:
            kwargs = TABLE[qualified]()
            status, result = timed_call(target, copy.deepcopy(kwargs), BASELINE_LIMIT_S)
            return (kwargs, result) if status == "ok" else None
        hints = hints_of(target)
        literals = _literals(target)
        required = [p for p in parameters(target) if p.default is inspect.Parameter.empty]
        for combo in range(COMBINATIONS):
            try:
                kwargs = {p.name: self.example(p.name, hints.get(p.name, p.annotation), combo, literals)
                          for p in required}
            except LookupError:
                return None
            # the first try may compile or load data; the later ones get the ordinary limit
            status, result = timed_call(target, copy.deepcopy(kwargs), BASELINE_LIMIT_S if combo == 0 else 1.0)
            if status == "ok":
                return kwargs, result
            if not required:
                return None
        return None

    def instance(self, cls):
        """A valid instance of a library class, built from its own baseline."""
        if cls not in self.instances:
            self.instances[cls] = None
            base = self(f"{cls.__module__}.{cls.__qualname__}", cls)
            self.instances[cls] = None if base is None else base[1]
        if self.instances[cls] is None:
            raise LookupError(cls)
        return copy.deepcopy(self.instances[cls])

    def example(self, name: str, hint, combo: int, literals: list[str]):
        """An example value for one parameter in combination ``combo``."""
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, __import__("types").UnionType):
            hint = next((a for a in args if a is not type(None)), hint)
            origin, args = typing.get_origin(hint), typing.get_args(hint)
        if hint is inspect.Parameter.empty:
            hint = np.ndarray if _ARRAY.match(name) else int
        if hint is bool:
            return bool(combo % 2)
        if hint is int:
            if _SMALL.search(name):
                return [2, 4, 8, 2, 1, 4][combo]
            return [64, 4, 8, 2, 1, 1024][combo]
        if hint is float:
            if _FRACTION.search(name):
                return [0.5, 0.5, 0.25, 0.1, 1.0, 0.5][combo]
            return [1.0, 4.0, 8.0, 2.0, 1e9, 0.5][combo]
        if hint is str:
            choices = [v for v in literals if v != name]
            return choices[combo % len(choices)] if choices else "x"
        if hint is np.ndarray:
            rng = np.random.default_rng(combo)
            shape = [(8, 8), (4, 4), (16,), (8, 4), (64, 64), (8,)][combo]
            return rng.standard_normal(shape)
        if hint is np.random.Generator:
            return np.random.default_rng(0)
        if origin in (tuple, list, typing.Sequence, typing.Iterable, __import__("collections.abc").abc.Sequence,
                      __import__("collections.abc").abc.Iterable):
            inner = args[0] if args else int
            item = self.example(name.rstrip("s"), inner, combo, literals)
            value = [item, copy.deepcopy(item)]
            return tuple(value) if origin is tuple else value
        if inspect.isclass(hint) and hint.__module__.startswith("mlsys_lab"):
            return self.instance(hint)
        raise LookupError(hint)
