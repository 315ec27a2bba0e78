"""What completes each hint's code into an answer: read by ``tests/course/test_hints.py``.

A hint's code block (tier 3, "nearly the answer") is run as the learner would use it: pasted into the exercise
cell in place of the solution, its gaps (each ``...``) filled, in order, with ``fills``; ``before`` is the setup the
hint leaves to the learner (what hint 2 describes) and ``after`` what follows it, both at the body's indentation.
``indent`` indents the hint itself under the last line of ``before`` (a hint that is the inside of a loop). A
fill of several lines takes the indentation of its gap. The completed function must pass the exercise's check.

An exercise cell with several solution regions (a CUDA kernel's source and its launcher) takes a list, one
completion per region in order: ``block`` is the hint code block it completes, ``None`` for a region no hint
covers (its body is then ``before`` alone).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Completion:
    fills: tuple[str, ...] = ()
    before: str = ""
    after: str = ""
    indent: int = 0
    block: int | None = 0


COMPLETIONS: dict[str, Completion | list[Completion]] = {
    # 00 · start here
    "tensor_bytes": Completion(fills=("BYTES_PER_ELEMENT[dtype]",)),
    # 01 · operators
    "can_fuse": Completion(),
    "assign_offsets": Completion(
        before="""placed, offsets = [], {}

def co_live(a, b):
    return a.start <= b.end and b.start <= a.end
""",
        after="""    offsets[iv.name] = offset
    placed.append((offset, iv))
return offsets
"""),
    "fuse_graph": Completion(
        before="""by_name = {n["name"]: n for n in nodes}
position = {n["name"]: k for k, n in enumerate(nodes)}
readers = {n["name"]: set() for n in nodes}
for node in nodes:
    for name in node["inputs"]:
        readers[name].add(node["name"])
""",
        after="""fused = []
for node in nodes:
    name = node["name"]
    members = sorted(group.get(name, [name]), key=position.get)
    if len(members) == 1:
        fused.append(node)
    elif name == members[-1]:
        reads = [i for m in members for i in by_name[m]["inputs"] if i not in members]
        fused.append({"name": name, "op": "fused", "inputs": list(dict.fromkeys(reads)),
                      "shape": node["shape"], "body": [by_name[m] for m in members]})
return fused
"""),
    "replace_silu": Completion(
        before="""by_name = {n["name"]: n for n in nodes}
readers = {n["name"]: [] for n in nodes}
for node in nodes:
    for name in node["inputs"]:
        readers[name].append(node["name"])
rewritten, dropped = {}, set()
"""),
    "bias_gelu": [Completion(block=0), Completion(block=1)],
    "dynamic_schedule": Completion(
        before="""n = len(durations)
waiting, unblocks = [0] * n, [[] for _ in range(n)]
for first, then in deps:
    unblocks[first].append(then)
    waiting[then] += 1
ready, free, running, rows, now = [t for t in range(n) if waiting[t] == 0], list(range(n_workers)), [], {}, 0.0
"""),
    # 02 · loops
    "legal_orders": Completion(fills=("[v[d] for d in order]",), before="depth = len(vectors[0])\n"),
    "misses_per_iteration": Completion(fills=("total += 1 / elements_per_line", "total += 1.0")),
    "lru_misses": Completion(fills=("lines.move_to_end(line)",
                                    "if len(lines) == ways:\n    lines.popitem(last=False)\nlines[line] = True")),
    "transformation_legal": Completion(fills=("legal = legal and bool(new[nonzero[0]] > 0)\n"
                                              "carried.add(int(nonzero[0]))",)),
    "atb_tiled": Completion(fills=("c[j] += aki * bk[j]",)),
    # 03 · roofline
    "classify_bound": Completion(fills=("best, limiter = roof, level",)),
    "compute_bound_batch": Completion(
        before="d, e = d_model, bytes_per_element\n",
        after="""
def intensity(batch):
    return 2 * batch * d * d / (e * (2 * batch * d + d * d))

while b > 1 and intensity(b - 1) >= ridge:
    b -= 1
while intensity(b) < ridge:
    b += 1
return b
"""),
    "loads_in_flight": Completion(fills=("n[knee] / r[knee]",
                                         "target * latency / (n_sms * threads_per_sm * bytes_per_load)")),
    "measure_on_roofline": Completion(
        fills=('"memory" if flop / n_bytes < peak_flops / bandwidth else "compute"',),
        before="""if kernel == "axpy":
    x, y = np.ones(n, np.float32), np.ones(n, np.float32)
    run = lambda: np.add(2 * x, y, out=y)
elif kernel == "sum":
    v = np.ones(n, np.float32)
    run = lambda: v.sum()
else:
    a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
    run = lambda: a @ b
"""),
    "tile_traffic": Completion(fills=(
        """if key in held:
    held.move_to_end(key)
    continue
hbm += size
while held and used + size > l2_bytes:
    used -= held.popitem(last=False)[1]
if size <= l2_bytes:
    held[key] = size
    used += size""",
        "l2 += rows * cols * element_bytes\nhbm += rows * cols * element_bytes")),
    "reduce_sum": [Completion(block=0), Completion(block=None, before="""
kernel = compile_learner_kernel(REDUCE_SUM_SOURCE, "reduce_sum")
out = xp.zeros(1, dtype=xp.float32)
if x.size == 0:
    return out
kernel((min((x.size + 255) // 256, 1024),), (256,), (x, out, np.int64(x.size)))
return out
""")],
    # 04 · memory hierarchy
    "transpose_cuda": [Completion(block=0), Completion(block=None, before="""
kernel = compile_learner_kernel(TRANSPOSE_SOURCE, "transpose")
rows, cols = a.shape
out = xp.empty((cols, rows), dtype=xp.float32)
if a.size == 0:
    return out
kernel(((cols + 31) // 32, (rows + 31) // 32), (32, 8), (a, out, np.int32(rows), np.int32(cols)))
return out
""")],
    "softmax_rows_cuda": [Completion(block=0), Completion(block=1)],
    "sgemm_tiled_cuda": [Completion(block=0), Completion(block=1)],
    "bf16_mma_cuda": [Completion(block=0), Completion(block=1)],
    "transpose_tiled": Completion(fills=("(by * 32 + r) * n_cols + bx * 32 + lane",
                                         "(bx * 32 + r) * n_rows + by * 32 + lane")),
    "block_sum": Completion(fills=("partial[t] + partial[t + s]",), before="lane = np.arange(32)\n"),
    # 05 · autotuning
    "random_search": Completion(fills=("int(np.argmin(times))",)),
    "grid_search": Completion(fills=("(2 * t + 1) * size // (2 * min(size, g))", "int(np.argmin(times))")),
    "model_guided_search": Completion(fills=(
        "features[measured], np.log(times), features",
        "score[measured] = np.inf\nnext_config = int(np.argmin(score))\nmeasured.append(next_config)\n"
        "times.append(measure(next_config))")),
    "spearman": Completion(fills=("out[values == v] = out[values == v].mean()",)),
    # 06 · training memory
    "quantize_groupwise": Completion(),
    "loss_scaling": Completion(after='return {"weights": w, "scales": scales, "skipped": skipped}\n'),
    "loss_scaler_step": Completion(fills=("good_steps == growth_interval",)),
    "checkpoint_plan": Completion(fills=("plan[-1] > 0", "plan.append(prev[plan[-1]])")),
    "softmax_cross_entropy": Completion(fills=("grad_out[:, None]",)),
    "softmax_xent_cuda": [Completion(block=0), Completion(block=1)],
    # 07 · collectives
    "ring_allreduce": Completion(fills=("[(r, (r + 1) % p, chunks[r][(r + 1 - step) % p]) for r in range(p)]",
                                        "chunks[dst][(src + 1 - step) % p][:] = data")),
    "halving_doubling": Completion(fills=(
        "[(mids[r], hi[r]) if r & d == 0 else (lo[r], mids[r]) for r in range(p2)]",
        "for (src, dst, _), data in zip(messages, net.exchange(messages)):\n"
        "    work[dst][keep[dst][0]:keep[dst][1]] += data",
        "messages = [(r, r ^ d, work[r][lo[r]:hi[r]]) for r in range(p2)]\n"
        "for (src, dst, _), data in zip(messages, net.exchange(messages)):\n"
        "    work[dst][lo[src]:hi[src]] = data",
        "back = [(r - p2, r, work[r - p2]) for r in range(p2, p)]\n"
        "for (_, dst, _), data in zip(back, net.exchange(back)):\n"
        "    work[dst] = data")),
    "hierarchical_allreduce": Completion(fills=(
        "if add:\n    chunks[dst][(position[src] + offset - s) % k] += data\n"
        "else:\n    chunks[dst][(position[src] + offset - s) % k][:] = data",
        "[np.array_split(shards[r][(local[r] + 1) % g], n_nodes) for r in range(p)]",
        "ring(pieces, across, node, n_nodes, 0, True)\nring(pieces, across, node, n_nodes, 1, False)",
        "ring(shards, in_node, local, g, 1, False)")),
    "hierarchical_alltoall": Completion(fills=(
        "buffers[r][[b * g + targets[r] for b in range(n_nodes)]]",
        "staging[dst][:, local[src]] = data",
        "for r in range(p):\n    out[r][node[r] * g:(node[r] + 1) * g] = staging[r][node[r]]",
        "messages = [(r, (node[r] + s) % n_nodes * g + local[r], staging[r][(node[r] + s) % n_nodes])\n"
        "            for r in range(p)]\n"
        "for (src, dst, _), data in zip(messages, net.exchange(messages)):\n"
        "    out[dst][node[src] * g:(node[src] + 1) * g] = data")),
    "allreduce_time": Completion(fills=(
        "a = b = 2 * (p - 1).bit_length()",
        "a, b = 2 * (p2.bit_length() - 1), 2 * (p2 - 1) / p2\nif p != p2:\n    a, b = a + 2, b + 2")),
    # 08 · parallelism
    "zero_memory": Completion(fills=("own if stage >= 2 else full", "own if stage >= 1 else full")),
    "microbatches_for_bubble": Completion(),
    "tp_mlp": Completion(),
    "one_f_one_b": Completion(
        before="""p, m = n_stages, n_microbatches
orders = []
for d in range(p):
    warmup = min(p - d - 1, m)
""",
        indent=4,
        after="""    orders.append(ops)
return orders
"""),
    "fsdp_step": Completion(
        fills=("for r in range(n):\n    new[r][i] = param_shards[r][i] - lr * g[r]",),
        before="""n, n_layers = len(x_shards), len(shapes)
hs, caches, new = list(x_shards), [[None] * n_layers for _ in range(n)], [[None] * n_layers for _ in range(n)]
for i in range(n_layers):
    full = group.all_gather([param_shards[r][i] for r in range(n)])
    for r in range(n):
        w = full[r][:shapes[i][0] * shapes[i][1]].reshape(shapes[i])
        hs[r], caches[r][i] = layer_forward(hs[r], w, i == n_layers - 1)
    group.free(i)
dys = [mse_loss(hs[r], target_shards[r])[1] / n for r in range(n)]
""",
        after="return new\n"),
    "ddp_schedule": Completion(
        before="clock, ready, current, filled, buckets = 0.0, {}, [], 0.0, []\n",
        after="""if current:
    buckets.append((current, filled))
schedule, stream_free = [], 0.0
for layers, n_bytes in buckets:
    start = max(ready[layers[-1]], stream_free)
    stream_free = start + allreduce_seconds(n_bytes)
    schedule.append((layers, start, stream_free))
return schedule
"""),
    # 09 · fault tolerance
    "checkpoint_interval": Completion(fills=("checkpoint_seconds",)),
    "goodput": Completion(fills=("after_failure",)),
    "crash_safe_writer": Completion(fills=("os.open(path.parent, os.O_RDONLY)",),
                                    after="os.fsync(folder)\nos.close(folder)\n"),
    "resume_training": Completion(
        fills=("resume.save_checkpoint(folder, state)\nsaved = state[\"step\"]",
               "if state[\"step\"] != saved:\n    resume.save_checkpoint(folder, state)"),
        before="x, y = make_data(resume.CONFIG)\n"),
    "replay_goodput": Completion(fills=("t, done = end, done + stretch\nif done >= work_seconds:\n"
                                        "    return work_seconds / t",)),
    "diagnose": Completion(fills=("hang_step, hung, detected = s, late, float(deadline)\nbreak",
                                  "[int(r) for r in np.flatnonzero(medians > 1.15 * np.median(medians))]")),
    # 10 · PEFT
    "lora_forward": Completion(fills=("(x @ a) @ b",)),
    "lora_backward": Completion(fills=("a.T", "dy_bt", "dy")),
    "lora_merge": Completion(fills=("scale * (a @ b)",)),
    "lora_param_count": Completion(fills=("rank * (d_in + d_out)",)),
    "nf4_quantize": Completion(fills=('midpoints, scaled, side="left"',)),
    "qlora_step": Completion(
        fills=("state[name] - lr * grads[name]",),
        before="""s, levels, size = state["scale"], state["levels"], state["block_size"]

def dequantized(codes, absmax, shape):
    return (levels[codes] * np.repeat(absmax, size)[:codes.size]).reshape(shape)

w1 = dequantized(state["codes1"], state["absmax1"], (state["a1"].shape[0], state["b1"].shape[1]))
w2 = dequantized(state["codes2"], state["absmax2"], (state["a2"].shape[0], state["b2"].shape[1]))
z = x @ w1 + s * ((x @ state["a1"]) @ state["b1"])
u = np.maximum(z, 0.0)
logits = u @ w2 + s * ((u @ state["a2"]) @ state["b2"])
grads = {}
"""),
    # 11 · MoE
    "route_with_capacity": Completion(
        before="""n_tokens, n_experts = logits.shape
indices = np.argsort(-logits, axis=1)[:, :k]
kept, load = np.zeros((n_tokens, k), dtype=bool), np.zeros(n_experts, dtype=int)
""",
        after="return indices, kept\n"),
    "top_k_gate": Completion(fills=("indices[t, j]",)),
    "aux_loss": Completion(
        before="""z = router_logits - router_logits.max(axis=1, keepdims=True)
probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
n_tokens, n = probs.shape
indices = np.argsort(-probs, axis=1)[:, :k]
""",
        after="return float(loss), grad\n"),
    "ep_dispatch": Completion(fills=("rows_j[ids_j == j * per + e]",)),
    "moe_permute_cuda": [Completion(block=0), Completion(block=1)],
    "moe_unpermute_cuda": [Completion(block=0, fills=("acc.x += w * v.x; acc.y += w * v.y; acc.z += w * v.z; "
                                                      "acc.w += w * v.w;",)), Completion(block=1)],
    # 12 · capstone
    "attention_backward": Completion(fills=("(dprobs * probs).sum(axis=-1, keepdims=True)",)),
    "average_gradients": Completion(fills=("(flat[start:start + size] / total).reshape(rank_grads[0][name].shape)",)),
}
