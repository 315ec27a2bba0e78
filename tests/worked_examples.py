"""Every exercise's worked example, as the prompt states it and as the reference recomputes it.

Read by ``tests/course/test_worked_examples.py``. ``shown`` is a passage of the prompt (its numbers, True, False and
None are compared in order, each to the precision it is printed with; its words must hold the value's words);
``computed`` is a Python expression evaluated where the exercise's function is the check's reference (or the
lesson's solution, where the check has no reference of that signature), after the lesson's ``SETUP``. An example
written as a doctest (``>>>``) in the prompt is run as one as well. When a prompt changes, change its entry too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    shown: str
    computed: str


@dataclass(frozen=True)
class Claim:
    """A statement of the prompt without numbers to compare: ``holds`` must evaluate to True."""

    shown: str
    holds: str


SETUP = {
    "00_start_here": """
from mlsys_lab.hardware import H100_SXM

H100_RIDGE = H100_SXM.peak("fp32") / H100_SXM.memory_bandwidth_bytes_per_s
""",
    "01_operators": """
from mlsys_lab.operators import exp, relu, sigmoid, tanh, trace
from mlsys_lab.operators.memory_plan import Interval
from mlsys_lab.operators.plain import kernels_and_bytes, to_plain

import numpy as np

from mlsys_lab.kernels.operators.bias_gelu import bias_gelu_reference

TABLE = [Interval("A", 0, 1, 100), Interval("B", 1, 2, 50), Interval("C", 2, 3, 100)]
X_EXAMPLE = np.array([[-1.0, 0.0, 1.0], [2.0, -2.0, 0.5]], dtype=np.float32)
BIAS_EXAMPLE = np.array([0.5, 0.0, -0.5], dtype=np.float32)

def arena(offsets):
    return max(offsets[iv.name] + iv.n_bytes for iv in TABLE)

def fusion_traffic():
    nodes, outputs = to_plain(trace(lambda x: relu(tanh(x) * 0.5) + 1.0, (4, 4)))
    return (*kernels_and_bytes(nodes), *kernels_and_bytes(fuse_graph(nodes, outputs)))
""",
    "02_loops": """
def fifo_misses(addresses, line_bytes, n_sets, ways):
    sets, misses = [[] for _ in range(n_sets)], 0
    for address in addresses:
        line = address // line_bytes
        held = sets[line % n_sets]
        if line not in held:
            misses += 1
            if len(held) == ways:
                held.pop(0)
            held.append(line)
    return misses
""",
    "03_roofline": """
from mlsys_lab.hardware import H200
law = gpu_run["littles_law"] if "gpu_run" in globals() else None
from mlsys_lab.kernels.roofline.reduce import sum_reference
""",
    "04_memory_hierarchy": """
from mlsys_lab.memory_hierarchy.warp_sim import run_reduce, run_transpose, transpose_naive_block
from mlsys_lab.exercises.memory_hierarchy_mma_cuda import EXAMPLE as MMA_EXAMPLE, exact_product
from mlsys_lab.kernels.memory_hierarchy.fused import softmax_reference
from mlsys_lab.kernels.memory_hierarchy.sgemm import sgemm_reference
""",
    "05_autotuning": """
import itertools
from mlsys_lab.autotuning.stats import standardize

def grid_points(n_values, budget):
    measure = RecordingMeasure(np.ones(n_values), grid=True)
    grid_search(measure, n_values, budget)
    return measure.calls

def bowl_run():
    grid = np.array(list(itertools.product(range(6), range(6))), dtype=float)
    measure = RecordingMeasure(np.exp(0.2 * ((grid - [4, 1]) ** 2).sum(1)))
    best = model_guided_search(measure, standardize(grid), 12, 0)
    return measure.calls, best
""",
    "06_training_memory": """
from mlsys_lab.kernels.training_memory.softmax_xent import softmax_xent_reference

XENT_EXAMPLE = (np.array([[2.0, 1, 0], [0, 0, 0]], dtype=np.float32), np.array([0, 2], dtype=np.int32))
SIX_LAYERS = (np.full(6, 10), np.full(6, 2), np.ones(6, dtype=np.int64))  # A, C, F of the example

def simulated(plan):
    return simulate_checkpoint_plan(*SIX_LAYERS, plan)
""",
    "07_collectives": """
from mlsys_lab.collectives.network import TwoLevelNetwork

def run(fn, buffers, net, *args):
    out = fn(buffers, net, *args)
    return out, net
""",
    "08_parallelism": """
from mlsys_lab.exercises.parallelism_fsdp import ShardedGroup
from mlsys_lab.parallelism.model import mlp

G = np.random.default_rng(0)
X, W1, W2 = G.normal(size=(1, 2, 3)), G.normal(size=(3, 8)), G.normal(size=(8, 3))

def fsdp_example():
    from mlsys_lab.parallelism.fsdp import layer_backward, layer_forward
    from mlsys_lab.nn import mse_loss
    w = G.normal(size=(2, 3))
    xs, ts = [G.normal(size=(2, 2)) for _ in range(2)], [G.normal(size=(2, 3)) for _ in range(2)]
    grads = []
    for x, t in zip(xs, ts):
        out, cache = layer_forward(x, w, True)
        grads.append(layer_backward(mse_loss(out, t)[1], cache, w)[1].ravel())
    g = grads[0] + grads[1]
    shards = [w.ravel()[:3], w.ravel()[3:]]  # rank 0 holds W.ravel()[:3], rank 1 W.ravel()[3:]
    new = fsdp_step(xs, ts, [[shards[0]], [shards[1]]], [(2, 3)], 0.1, ShardedGroup([shards]))
    return all(np.allclose(new[r][0], w.ravel()[3 * r:3 * r + 3] - 0.1 * g[3 * r:3 * r + 3] / 2) for r in range(2))
""",
    "09_fault_tolerance": """
import tempfile
from pathlib import Path

def writer_run():
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ckpt.bin"
        path.write_bytes(b"OLD")
        def killed_after_first():
            yield b"ab"
            raise KeyboardInterrupt
        try:
            write_checkpoint(path, killed_after_first())
        except KeyboardInterrupt:
            pass
        after_kill = path.read_bytes()
        write_checkpoint(path, iter([b"ab", b"cd"]))
        return after_kill, path.read_bytes(), sorted(p.name for p in Path(folder).iterdir())

def resume_example():
    batches = resume.random_batches(12, seed=0)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        def killed_at_8():
            for number, batch in enumerate(batches, start=1):
                if number == 8:
                    raise KeyboardInterrupt
                yield batch
        try:
            train_with_resume(folder, killed_at_8())
        except KeyboardInterrupt:
            pass
        after_kill = sorted(p.stem for p in folder.glob("ckpt_*.json"))
        seen = []
        def counted():
            for batch in batches:
                seen.append(1)
                yield batch
        train_with_resume(folder, counted())
        return after_kill, sorted(p.stem for p in folder.glob("ckpt_*.json"))
""",
    "10_peft": """
from mlsys_lab.training_memory.quantize import nf4_levels

def first_step_moves():
    g = np.random.default_rng(0)
    state = _qlora_state(g, zero_b=True, block_size=64, rank=2, scale=2.0)
    x = g.normal(size=(16, state["a1"].shape[0]))
    labels = g.integers(0, state["b2"].shape[1], size=16)
    new, _ = qlora_step(state, x, labels, 0.5)
    return [name for name in ("a1", "b1", "a2", "b2") if not np.array_equal(new[name], state[name])]
""",
    "11_moe": """
import numpy as np

from mlsys_lab.kernels.moe.permute import moe_permute_reference, moe_unpermute_reference
from mlsys_lab.moe.gating import assign_with_capacity

X_PERMUTE = np.arange(1, 13, dtype=np.float32).reshape(4, 3)
EXPERT_PERMUTE = np.array([[0, 1], [0, 2], [0, 1], [1, 0]], dtype=np.int32)
SLOT_PERMUTE = assign_with_capacity(EXPERT_PERMUTE, 3, 2)[1].astype(np.int32)
Y_UNPERMUTE = (moe_permute_reference(X_PERMUTE, EXPERT_PERMUTE, SLOT_PERMUTE, 3, 2)
               * np.float32([1, 2, 3])[:, None, None])
WEIGHT_UNPERMUTE = np.array([[0.75, 0.25], [0.5, 0.5], [0.6, 0.4], [0.9, 0.1]], dtype=np.float32)
""",
}

EXAMPLES: dict[str, list[Example]] = {
    # 00 · start here ----------------------------------------------------------------------------------------
    "tensor_bytes": [
        Example("= 33,554,432 bytes", 'tensor_bytes((4096, 4096), "fp16")'),
    ],
    "add_intensity": [
        Example("≈ 0.083 FLOP/byte", "add_intensity(1000, 4)"),
        Example("67 TFLOP/s / 3.35 TB/s = 20 FLOP/byte, **240 times** higher",
                "(H100_SXM.peak('fp32') / 1e12, H100_SXM.memory_bandwidth_bytes_per_s / 1e12, H100_RIDGE, "
                "H100_RIDGE / add_intensity(1000, 4))"),
    ],
    # 01 · operators -----------------------------------------------------------------------------------------
    "matmul_intensity": [
        Example("≈ 170.7 FLOP/B", "matmul_intensity(1024, 1024, 1024, 4)"),
    ],
    "can_fuse": [
        Example('`can_fuse(g, "t1", "t3")` (tanh → mul) is `True`',
                'can_fuse(trace(lambda x: relu(tanh(x) * 0.5), (8, 8)), "t1", "t3")'),
        Example("exp → add is `False`",
                'can_fuse(trace(lambda x: (lambda t: t * (t + 1.0))(exp(x)), (8, 8)), "t1", "t3")'),
    ],
    "assign_offsets": [
        Example('`{"A": 0, "B": 100, "C": 0}` needs a 150-byte arena',
                "(dict(sorted(assign_offsets(TABLE).items())), arena(assign_offsets(TABLE)))"),
    ],
    "fuse_graph": [
        Example("4 kernels moving 512 bytes become 1 kernel moving 128", "fusion_traffic()"),
    ],
    "dynamic_schedule": [
        Example("[(0, 0, 0.0, 3.0), (1, 1, 0.0, 2.0), (2, 0, 3.0, 5.0), (3, 1, 2.0, 3.0)]",
                "sorted(dynamic_schedule([3, 2, 2, 1], [(0, 2), (1, 2), (1, 3)], 2))"),
    ],
    "bias_gelu": [  # a CUDA kernel: the prompt's numbers are the NumPy reference's (the check compares with it)
        Example("the output is `[[-0.3086, 0, 0.6914], [4.9698, -0.0908, 0]]`",
                "bias_gelu_reference(X_EXAMPLE, BIAS_EXAMPLE, 2.0)"),
        Example("(`x + bias` is `[[-0.5, 0, 0.5], [2.5, -2, 0]]`)", "X_EXAMPLE + BIAS_EXAMPLE"),
    ],
    # 02 · loops ---------------------------------------------------------------------------------------------
    "legal_orders": [
        Example("`legal_orders([(1, -1)])` is `[(0, 1)]`", "([(1, -1)], legal_orders([(1, -1)]))"),
        Claim("`legal_orders([(0, 0, 1)])` lists all six orders", "len(set(legal_orders([(0, 0, 1)]))) == 6"),
    ],
    "misses_per_iteration": [
        Example('`misses_per_iteration("ijk", 8)` is `1.125`', '(8, misses_per_iteration("ijk", 8))'),
        Example('`misses_per_iteration("kij", 8)` is `0.25`', '(8, misses_per_iteration("kij", 8))'),
    ],
    "lru_misses": [
        Example("line_bytes=64, n_sets=1, ways=2)` is `4`",
                "(64, 1, 2, lru_misses([0, 8, 64, 0, 128, 0, 64], line_bytes=64, n_sets=1, ways=2))"),
        Example("misses 5 times", "fifo_misses([0, 8, 64, 0, 128, 0, 64], 64, 1, 2)"),
    ],
    "transformation_legal": [
        Example("[[1, 1], [1, 0]])`, is `(True, [1])`",
                "([[1, 1], [1, 0]], transformation_legal([(1, 0), (0, 1), (1, 1)], [[1, 1], [1, 0]]))"),
        Example("[[1, 0], [0, -1]])`, is `(False, [])`",
                "([[1, 0], [0, -1]], transformation_legal([(1, 0), (0, 1)], [[1, 0], [0, -1]]))"),
    ],
    "atb_tiled": [
        Example("returns `[[6, 6, 6, 6], [9, 9, 9, 9]]`",
                "atb_tiled(np.arange(6.0).reshape(3, 2), np.ones((3, 4)), np.empty((2, 4)), 2)"),
    ],
    # 03 · roofline ------------------------------------------------------------------------------------------
    "classify_bound": [
        Example('`(4.79e13, "L2")`',
                'classify_bound(2 * 4096**3, {"HBM": 12 * 4096**2, "L2": 4 * (2 * 4096**3 / 16 + 4096**2)}, 67e12, '
                '{"HBM": 4.8e12, "L2": 12e12})'),
        Example("683 FLOP/B against HBM", "2 * 4096**3 / (12 * 4096**2)"),
        Example("3.99 FLOP/B × 12 TB/s = 47.9 TFLOP/s",
                "(2 * 4096**3 / (4 * (2 * 4096**3 / 16 + 4096**2)), 12, "
                "2 * 4096**3 / (4 * (2 * 4096**3 / 16 + 4096**2)) * 12e12 / 1e12)"),
    ],
    "compute_bound_batch": [
        Example("`compute_bound_batch(8192, 989.5e12, 4.8e12, 2)` (H200, bf16) is `218`",
                "(8192, 989.5e12, 4.8e12, 2, compute_bound_batch(8192, 989.5e12, 4.8e12, 2))"),
        Example("it is `None`", "compute_bound_batch(128, 989.5e12, 4.8e12, 2)"),
        Example("the 206 FLOP/B ridge", "H200.peak('bf16') / H200.memory_bandwidth_bytes_per_s"),
    ],
    "loads_in_flight": [
        Example("gives `(1.139e-06, 8)`",
                'loads_in_flight([r["bytes_in_flight"] for r in law["hbm_inflight_sweep"]], '
                '[r["bytes_per_s"] for r in law["hbm_inflight_sweep"]], 0.95, 132, 1024, 4)'),
    ],
    "measure_on_roofline": [
        Example("`flop = 131072`, `bytes = 786432`, `attainable = 8e11`",
                '[measure_on_roofline("axpy", 2**16, 67e12, 4.8e12)[k] for k in ("flop", "bytes", "attainable")]'),
        Example('`bound = "memory"`', 'measure_on_roofline("axpy", 2**16, 67e12, 4.8e12)["bound"]'),
    ],
    "reduce_sum": [  # a CUDA kernel: the prompt's numbers are the NumPy reference's
        Example("`reduce_sum(x)` is `[45.]`", "[sum_reference(np.arange(10, dtype=np.float32))]"),
        Example("134,217,728 bytes to read, 0.25 FLOP per byte", "(4 * 2**25, (2**25 - 1) / (4 * 2**25))"),
    ],
    "tile_traffic": [
        Example('is `{"HBM": 192, "L2": 320}`', "tile_traffic(4, 4, 4, 2, 2, 2, l2_bytes=2**20, element_bytes=4)"),
        Example("every load comes from HBM: 320",
                'tile_traffic(4, 4, 4, 2, 2, 2, l2_bytes=0, element_bytes=4)["HBM"]'),
    ],
    # 04 · memory hierarchy ----------------------------------------------------------------------------------
    "sectors": [
        Example("is **5**", "sectors(4 + 4 * np.arange(32), 4)"),
        Example("is 1 sector", "sectors(np.zeros(32, dtype=np.int64), 4)"),
    ],
    "bank_passes": [
        Example("is **4**", "bank_passes(16 * np.arange(32), 16)"),
        Example("take 1 pass, `words[32 * lane]` 32, and all lanes reading one word 1",
                "(bank_passes(4 * np.arange(32), 4), 32, bank_passes(128 * np.arange(32), 4), "
                "bank_passes(np.zeros(32, dtype=np.int64), 4))"),
    ],
    "tiled_matmul_bytes": [
        Example("= **2,113,536** bytes", "tiled_matmul_bytes(64, 64, 64, 1)"),
    ],
    "transpose_tiled": [
        Example("writes B in 2048 sectors; the budget is 256",
                "(run_transpose(transpose_naive_block, np.zeros((32, 64)))[1].store_sectors, 32 * 64 * 4 // 32)"),
    ],
    "block_sum": [
        Example("`out = [32640, 98176]`", "run_reduce(block_sum, np.arange(512.0))[0]"),
        Example("at most **45 bank passes per block**", "block_sum_passes()"),
    ],
    "transpose_cuda": [  # a CUDA kernel: the prompt's numbers are a.T, what the check compares with
        Example("is `[[0, 3], [1, 4], [2, 5]]`", "np.arange(6, dtype=np.float32).reshape(2, 3).T"),
    ],
    "softmax_rows_cuda": [  # a CUDA kernel: the prompt's numbers are the float64 softmax the check compares with
        Example("is `[[0.0900, 0.2447, 0.6652], [0.3333, 0.3333, 0.3333]]`",
                "softmax_reference(np.array([[1, 2, 3], [1000, 1000, 1000]], dtype=np.float32))"),
    ],
    "sgemm_tiled_cuda": [  # a CUDA kernel: the prompt's numbers are the float64 product the check compares with
        Example("is `[[5, 8, 11, 14], [-4, 8, 20, 32]]`",
                "sgemm_reference(np.arange(6, dtype=np.float32).reshape(2, 3), "
                "np.arange(12, dtype=np.float32).reshape(3, 4) - 5)"),
    ],
    "bf16_mma_cuda": [  # a CUDA kernel: the prompt's numbers are the float64 product the check compares with
        Example("`C[1, 0]` is `-1`, `C[0, 1]` is `1`, `C[33, 10]` is `9` and `C[63, 63]` is `32`",
                "[(i, j, exact_product(*MMA_EXAMPLE).exact[i, j]) for i, j in ((1, 0), (0, 1), (33, 10), (63, 63))]"),
        Claim("so C[i, j] = j - i % 32",
              "np.array_equal(exact_product(*MMA_EXAMPLE).exact, np.arange(64) - np.arange(64)[:, None] % 32)"),
    ],
    "transpose_padded": [
        Example("kernel takes 2112 passes; the budget is 128",
                "(run_transpose(reference_transpose_tiled, np.zeros((32, 64)))[1].shared_passes, 2 * 32 * 64 // 32)"),
    ],
    # 05 · autotuning ----------------------------------------------------------------------------------------
    "random_search": [
        Example("is `[4, 6, 2]`, which take 6, 4 and 8 s, so `random_search` returns `6`",
                "(list(np.random.default_rng(0).permutation(10)[:3]), "
                "[10 - i for i in np.random.default_rng(0).permutation(10)[:3]], "
                "random_search(lambda i: 10.0 - i, 10, 3, 0))"),
    ],
    "grid_search": [
        Example("27 measurements, from `(0, 0, 0)` to `(4, 4, 4)`",
                "(len(grid_points([5, 5, 5], 27)), grid_points([5, 5, 5], 27)[0], grid_points([5, 5, 5], 27)[-1])"),
        Example("each knob sampled at values 0, 2 and 4", "sorted({p[0] for p in grid_points([5, 5, 5], 27)})"),
        Example("A budget of 63 still gives `g = 3`", "(63, len({p[0] for p in grid_points([5, 5, 5], 63)}))"),
        Example("`g = 3` costs 3·2·2·3 = 36",
                "(len({p[0] for p in grid_points([6, 2, 2, 6], 40)}), "
                "*[len({p[q] for p in grid_points([6, 2, 2, 6], 40)}) for q in range(4)], "
                "len(grid_points([6, 2, 2, 6], 40)))"),
    ],
    "model_guided_search": [
        Example("measures configs 4, 34, 30 and 2; the model then picks 24, 18 and 25", "bowl_run()[0][:7]"),
        Example("`model_guided_search` returns `25`", "bowl_run()[1]"),
    ],
    "spearman": [
        Example("`spearman([1, 2, 2, 3], [1, 3, 2, 4])` is `0.9487`",
                "([1, 2, 2, 3], [1, 3, 2, 4], spearman([1, 2, 2, 3], [1, 3, 2, 4]))"),
    ],
    # 06 · training memory -----------------------------------------------------------------------------------
    "layer_norm_backward": [
        Example("∂L/∂x ≈ [[0.2683, −0.3578, −0.0894, 0.1789]]",
                "layer_norm_backward(np.array([[1.0, 2, 3, 4]]), np.array([[1.0, 0, 0, 0]]))"),
        Example("y ≈ [−1.342, −0.447, 0.447, 1.342]", "(np.arange(1.0, 5) - 2.5) / np.sqrt(1.25 + 1e-5)"),
    ],
    "training_bytes": [
        Example("1,555,969,600 parameters × 16 B = 24.90 GB of states",
                "(12 * 48 * 1600**2 + 13 * 48 * 1600 + 50257 * 1600, 16, "
                "16 * (12 * 48 * 1600**2 + 13 * 48 * 1600 + 50257 * 1600) / 1e9)"),
        Example("= 48 × 186.78 MB of activations: 33.86 GB in all",
                "(48, 1024 * 1600 * (34 + 5 * 25 * 1024 / 1600) / 1e6, "
                "training_bytes(48, 1600, 25, 50257, 1, 1024) / 1e9)"),
    ],
    "quantize_groupwise": [
        Example("so [0.1143, −0.2]", "quantize_groupwise(np.array([[0.1, -0.2, 0.05, 0.4]], np.float32), 4, 2)[0, :2]"),
        Example("so [0.0571, 0.4]", "quantize_groupwise(np.array([[0.1, -0.2, 0.05, 0.4]], np.float32), 4, 2)[0, 2:]"),
    ],
    "loss_scaling": [
        Example("scales [1024, 1024, 512, 512, 1024, 1024], skipped [False, True, False, False, False, False]",
                "(lambda r: (r['scales'], r['skipped']))(train_with_loss_scaling("
                "lambda t, scale: (np.array([1e-3, 100.0 if t == 1 else 1e-3]) * scale).astype(np.float16), "
                "np.zeros(2, np.float32), 1.0, 6, 1024.0, 2.0, 0.5, 2))"),
        Example("w ≈ −5 × 10⁻³ (five applied steps",
                "(float(train_with_loss_scaling("
                "lambda t, scale: (np.array([1e-3, 100.0 if t == 1 else 1e-3]) * scale).astype(np.float16), "
                "np.zeros(2, np.float32), 1.0, 6, 1024.0, 2.0, 0.5, 2)['weights'][0]),)"),
    ],
    "loss_scaler_step": [
        Example("returns `(array([1.526e-05, 4.578e-05, -3.725e-09], dtype=float32), False, 131072.0, 0)`",
                "loss_scaler_step(np.array([1.0, 3.0, -2.0 ** -12], dtype=np.float16), 65536.0, 1, 2.0, 0.5, 2)"),
        Claim("Unscaled in fp16, the last entry (2⁻²⁸) would flush to zero again",
              "float(np.float16(-2.0 ** -12) * np.float16(1 / 65536.0)) == 0.0 and 2.0 ** -12 / 65536 == 2.0 ** -28"),
    ],
    "checkpoint_plan": [
        Example("`[0, 3]` peaks at 2 + 30 = 32 and recomputes 3 layers",
                "(checkpoint_plan(*SIX_LAYERS, 34), 2, 30, simulated([0, 3]).peak_bytes, "
                "simulated([0, 3]).recompute_cost)"),
        Example("`[0]` peaks at 60", "([0], simulated([0]).peak_bytes)"),
        Example("`[0, 1, 3]` (peak 34, recompute 3)",
                "([0, 1, 3], simulated([0, 1, 3]).peak_bytes, simulated([0, 1, 3]).recompute_cost)"),
    ],
    "softmax_cross_entropy": [
        Example("= 0.4076", "softmax_cross_entropy(np.array([[2.0, 1, 0]]), np.array([0]), 0.0, np.array([1.0]))[0]"),
        Example("[[−0.3348, 0.2447, 0.0900]]",
                "softmax_cross_entropy(np.array([[2.0, 1, 0]]), np.array([0]), 0.0, np.array([1.0]))[1]"),
    ],
    "softmax_xent_cuda": [  # a CUDA kernel: the prompt's numbers are the NumPy reference's (the check compares with it)
        Example("`loss` is `[0.4076, 1.0986]`", "softmax_xent_reference(*XENT_EXAMPLE)[0]"),
        Example("`dlogits` is `[[−0.3348, 0.2447, 0.0900], [0.3333, 0.3333, −0.6667]]`",
                "softmax_xent_reference(*XENT_EXAMPLE)[1]"),
    ],
    # 07 · collectives ---------------------------------------------------------------------------------------
    "ring_allreduce": [
        Example("`[60, 64, 68, 72, 76, 80, 84, 88]`",
                "run(ring_allreduce, [np.arange(8.0) + 10 * r for r in range(4)], simulate.Network(4))[0][0]"),
        Example("= 6 rounds", "run(ring_allreduce, [np.arange(8.0) + 10 * r for r in range(4)], "
                              "simulate.Network(4))[1].steps"),
        Example("= 96 bytes", "set(run(ring_allreduce, [np.arange(8.0) + 10 * r for r in range(4)], "
                              "simulate.Network(4))[1].bytes_sent.tolist()).pop()"),
    ],
    "halving_doubling": [
        Example("`[240, 240, 144, 144, 96, 96]`",
                "run(halving_doubling, [np.arange(12.0) * (r + 1) for r in range(6)], simulate.Network(6))[1]"
                ".bytes_sent"),
        Example("give p' = 4 and 6 rounds",
                "(4, run(halving_doubling, [np.arange(12.0) * (r + 1) for r in range(6)], simulate.Network(6))[1]"
                ".steps)"),
    ],
    "hierarchical_allreduce": [
        Example("= 8 rounds", "run(hierarchical_allreduce, [np.arange(16.0) * (r + 1) for r in range(8)], "
                              "TwoLevelNetwork(2, 4), 4)[1].steps"),
        Example("= 192 bytes over NVLink", "set(run(hierarchical_allreduce, [np.arange(16.0) * (r + 1) for r in "
                                           "range(8)], TwoLevelNetwork(2, 4), 4)[1].bytes_sent_intra.tolist()).pop()"),
        Example("= 32 bytes across nodes", "set(run(hierarchical_allreduce, [np.arange(16.0) * (r + 1) for r in "
                                           "range(8)], TwoLevelNetwork(2, 4), 4)[1].bytes_sent_inter.tolist()).pop()"),
    ],
    "hierarchical_alltoall": [
        Example("after 1 + 1 = 2 rounds, every rank having sent 2·8 = 16 bytes over NVLink and 16 across nodes",
                "(1, 1, *(lambda net: (net.steps, 2, 8, set(net.bytes_sent_intra.tolist()).pop(), "
                "set(net.bytes_sent_inter.tolist()).pop()))(run(hierarchical_alltoall, "
                "[10.0 * r + np.arange(4.0).reshape(4, 1) for r in range(4)], TwoLevelNetwork(2, 2), 2)[1]))"),
    ],
    "allreduce_time": [
        Example("≈ 0.03765 s (37.65 ms)", "(allreduce_time('ring', 2**30, 8, 5e-6, 1 / 50e9), "
                                         "1e3 * allreduce_time('ring', 2**30, 8, 5e-6, 1 / 50e9))"),
    ],
    # 08 · parallelism ---------------------------------------------------------------------------------------
    "zero_memory": [
        Example("`zero_memory([10, 6], 4, 3) == 116`", "([10, 6], 4, 3, zero_memory([10, 6], 4, 3))"),
        Example("At stage 0 nothing is sharded: $16 \\cdot 16 = 256$", "(0, 16, 16, zero_memory([10, 6], 4, 0))"),
    ],
    "microbatches_for_bubble": [
        Example("first holds at $m = 27$", "microbatches_for_bubble(4, 0.1, '1f1b', 1)"),
        Example("the multiple of 4 makes it 16", "(4, microbatches_for_bubble(4, 0.1, 'interleaved', 2))"),
        Example("$p = 4$ and 20% must give 12", "(4, 20, microbatches_for_bubble(4, 0.2, '1f1b', 1))"),
    ],
    "tp_mlp": [
        Claim("rank 0 computes `mlp(x, w1[:, :4], w2[:4])[0]` and rank 1 `mlp(x, w1[:, 4:], w2[4:])[0]`; their sum is "
              "`mlp(x, w1, w2)[0]`, on both ranks after the all-reduce",
              "all(np.allclose(out, mlp(X, W1[:, :4], W2[:4])[0] + mlp(X, W1[:, 4:], W2[4:])[0]) "
              "and np.allclose(out, mlp(X, W1, W2)[0]) for out in tp_mlp(X, W1, W2, 2, RecordingGroup(2)))"),
    ],
    "one_f_one_b": [
        Example('`[[("F", 0), ("F", 1), ("B", 0), ("F", 2), ("B", 1), ("B", 2)], [("F", 0), ("B", 0), ("F", 1), '
                '("B", 1), ("F", 2), ("B", 2)]]`', "one_f_one_b(2, 3)"),
    ],
    "fsdp_step": [
        Claim("rank r's new shard is `param_shards[r][0] - lr * g[r] / 2`", "fsdp_example()"),
    ],
    "ddp_schedule": [
        Example("`[([3], 1.0, 1.66), ([2, 1], 3.0, 3.72), ([0], 4.0, 4.66)]`",
                "ddp_schedule([1.0] * 4, [4] * 4, 4, 8, lambda n: {4: 0.66, 8: 0.72}[n])"),
    ],
    # 09 · fault tolerance -----------------------------------------------------------------------------------
    "checkpoint_interval": [
        Example("≈ 10,986 s (3.05 h)", "(50_000 * 3600 / 16384, 50_000 / 16384)"),
        Example("≈ 811.9 s, a checkpoint every 13.5 minutes",
                "(checkpoint_interval(16384, 50_000.0, 30.0), checkpoint_interval(16384, 50_000.0, 30.0) / 60)"),
    ],
    "goodput": [
        Example("is 0.8995", "goodput(600.0, 30.0, 300.0, 3 * 3600.0)"),
    ],
    "crash_safe_writer": [
        Claim('Killed after the first chunk, the file at `path` must still read `b"OLD"`; run to the end, it reads '
              '`b"abcd"` and the folder holds no other file',
              'writer_run() == (b"OLD", b"abcd", ["ckpt.bin"])'),
    ],
    "resume_training": [
        Claim("killed while waiting for batch 8: `ckpt_5` is on disk. The restart resumes from step 5, skips batches "
              "1–5, trains 6–12 and saves `ckpt_10` and `ckpt_12`",
              'resume_example() == (["ckpt_5"], ["ckpt_10", "ckpt_12", "ckpt_5"])'),
    ],
    "replay_goodput": [
        Example("1080 s: 600 / 1080 = 0.5556",
                "(1080, 600, 1080, replay_goodput(np.array([230.0]), 600.0, 200.0, 50.0, 100.0))"),
        Example("600 / 750 = 0.8", "(600, 750, replay_goodput(np.array([]), 600.0, 200.0, 50.0, 100.0))"),
    ],
    "diagnose": [
        Example('`{"hang_step": 1, "hung_ranks": [1], "detected_at": 7.3, "stragglers": []}`',
                "diagnose(np.array([[1.0, 1.2], [2.3, np.nan]]), np.array([[1.3, 1.3], [np.nan, np.nan]]), 5.0)"),
    ],
    # 10 · PEFT ----------------------------------------------------------------------------------------------
    "lora_forward": [
        Example("so the layer returns `[[1, 4]]`",
                "lora_forward(np.array([[1.0, 2]]), np.eye(2), np.array([[1.0], [0]]), np.array([[0.0, 1]]), 2.0)"),
    ],
    "lora_backward": [
        Example("= `[[3, 1]]`; dA = 2 · xᵀ `[[1]]` = `[[2], [4]]`; dB = 2 · (x A)ᵀ dY = 2 · `[[1]]` `[[1, 1]]` = "
                "`[[2, 2]]`",
                "(lambda dx, da, db: (dx, 2, 1, da, 2, 2, 1, 1, 1, db))(*lora_backward(np.array([[1.0, 2]]), "
                "np.eye(2), np.array([[1.0], [0]]), np.array([[0.0, 1]]), 2.0, np.array([[1.0, 1]])))"),
    ],
    "lora_merge": [
        Example("the merged weight is `[[1, 2], [0, 1]]`",
                "lora_merge(np.eye(2), np.array([[1.0], [0]]), np.array([[0.0, 1]]), 2.0)"),
    ],
    "lora_param_count": [
        Example("= 18,874,368", "lora_param_count([(12288, 12288)] * 2, 4, 96)"),
    ],
    "nf4_quantize": [
        Example("the answer is codes `[12, 0, 7, 15]` and absmax `[1.0, 0.25]`",
                "nf4_quantize(np.array([0.5, -1, 0, 0.25]), nf4_levels(), 2)"),
        Example("the nearest levels are 0.4407 (index 12, nearer than 0.5626), −1 (index 0), 0 (index 7) and "
                "1 (index 15)",
                "(nf4_levels()[12], 12, nf4_levels()[13], nf4_levels()[0], 0, nf4_levels()[7], 7, "
                "nf4_levels()[15], 15)"),
    ],
    "qlora_step": [
        Claim("only B1 and B2 move in the first step", 'first_step_moves() == ["b1", "b2"]'),
    ],
    # 11 · MoE -----------------------------------------------------------------------------------------------
    "route_with_capacity": [
        Example("indices `[[0], [0], [1]]`, kept `[[True], [False], [True]]`",
                "route_with_capacity(np.array([[2.0, 0], [1, 0], [0, 3]]), 1, 1)"),
    ],
    "top_k_gate": [
        Example("token 0's weights are softmax(2, 0) = (0.881, 0.119)",
                "(0, 2, 0, *top_k_gate(np.array([[2.0, 0], [1, 0], [0, 3]]), 2, 2)[0].sum(axis=1))"),
        Example("`combine[0, 1, 1] = 0.119`",
                "(0, 1, 1, top_k_gate(np.array([[2.0, 0], [1, 0], [0, 3]]), 2, 2)[0, 1, 1])"),
    ],
    "aux_loss": [
        Example("loss $= 2 \\cdot 0.806 = 1.612$",
                "(2, aux_loss(np.array([[2.0, 0], [1, 0]]), 1)[0] / 2, aux_loss(np.array([[2.0, 0], [1, 0]]), 1)[0])"),
        Example("grad `[[0.105, -0.105], [0.197, -0.197]]`", "aux_loss(np.array([[2.0, 0], [1, 0]]), 1)[1]"),
    ],
    "ep_dispatch": [
        Example("Result: `out[0] = [[b], [d]]`, `out[1] = [[c], [a, e]]`",
                "(lambda out: (0, out[0], 1, out[1]))([[', '.join('abcde'[int(v)] for v in rows[:, 0]) "
                "for rows in rank] for rank in ep_dispatch("
                "[np.array([[0.0], [1], [2]]), np.array([[3.0], [4]])], [np.array([3, 0, 2]), np.array([1, 3])], 4, 2, "
                "AllToAllGroup(2))])"),
    ],
    "moe_permute_cuda": [  # a CUDA kernel: the prompt's numbers are the NumPy reference's (the check compares with it)
        Example("order gives `slot = [[0, 1], [1, 0], [-1, -1], [0, -1]]`", "SLOT_PERMUTE"),
        Example("the buffers are `[[[1, 2, 3], [4, 5, 6]], [[10, 11, 12], [1, 2, 3]], [[4, 5, 6], [0, 0, 0]]]`",
                "moe_permute_reference(X_PERMUTE, EXPERT_PERMUTE, SLOT_PERMUTE, 3, 2)"),
    ],
    "moe_unpermute_cuda": [
        Example("the output is `[[1.25, 2.5, 3.75], [8, 10, 12], [0, 0, 0], [18, 19.8, 21.6]]`",
                "moe_unpermute_reference(Y_UNPERMUTE, EXPERT_PERMUTE, SLOT_PERMUTE, WEIGHT_UNPERMUTE)"),
    ],
}
