"""Do lesson 01's checks reject every plausible wrong answer on every seed (and pass the reference)?"""

from __future__ import annotations

from catalogue import Catalogue, catalogue_tests

from mlsys_lab.exercises.operators import (
    check_assign_offsets,
    check_can_fuse,
    check_dynamic_schedule,
    check_fuse_graph,
    check_matmul_intensity,
    check_replace_silu,
    reference_can_fuse,
    reference_fuse_graph,
    reference_replace_silu,
)
from mlsys_lab.operators.ir import FUSABLE, OP_CLASS
from mlsys_lab.operators.memory_plan import plan_greedy_by_size
from mlsys_lab.operators.schedule import list_schedule


def matmul_intensity(m, n, k, b):
    return 2 * m * n * k / ((m * k + k * n + m * n) * b)


def fuse_rule(graph, p, c, *, shape=True, outputs=True, readers="only", ops=FUSABLE, consumer_op=True):
    """The rule with one of its parts left out or done wrong (the catalogue's wrong answers)."""
    pn, cn = graph.node(p), graph.node(c)
    users = graph.users()[p]
    ok_readers = {"only": set(users) == {c}, "one": len(users) == 1, "any": c in users}[readers]
    return (pn.op in ops and (cn.op in ops or not consumer_op) and (pn.shape == cn.shape or not shape)
            and ok_readers and (p not in graph.outputs or not outputs))


ELEMENTWISE_CLASS = frozenset(op for op, cls in OP_CLASS.items() if cls == "elementwise")


def greedy_plan(intervals, key=lambda iv: (-iv.n_bytes, iv.start, iv.name), touching_overlap=True, fit=True,
                cursor_max=True):
    """Greedy placement in the order ``key``: each tensor at the lowest (or best) gap that fits it."""
    placed, offsets = [], {}
    for iv in sorted(intervals, key=key):
        touch = 0 if touching_overlap else 1  # end exclusive: a tensor ending at step s frees it for one starting at s
        busy = sorted((offsets[o.name], offsets[o.name] + o.n_bytes) for o in placed
                      if o.start + touch <= iv.end and iv.start + touch <= o.end)
        cursor = 0
        for lo, hi in busy:
            if lo - cursor >= (iv.n_bytes if fit else 1):
                break
            cursor = max(cursor, hi) if cursor_max else hi
        offsets[iv.name] = cursor
        placed.append(iv)
    return offsets


def end_to_end(intervals):
    offsets, cursor = {}, 0
    for iv in intervals:
        offsets[iv.name], cursor = cursor, cursor + iv.n_bytes
    return offsets


CATALOGUES = [
    Catalogue("matmul_intensity", check_matmul_intensity, matmul_intensity, {
        "m·n·k FLOPs (a multiply-add counted once)": lambda m, n, k, b: m * n * k / ((m * k + k * n + m * n) * b),
        "C never written": lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n) * b),
        "C read and written (C += A·B)": lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n + 2 * m * n) * b),
        "square assumed (n for every dimension)": lambda m, n, k, b: 2 * n**3 / (3 * n * n * b),
        "bits, not bytes": lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n + m * n) * b * 8),
        "ignores bytes_per_element (fp32)": lambda m, n, k, b: 2 * m * n * k / ((m * k + k * n + m * n) * 4),
        "integer division": lambda m, n, k, b: 2 * m * n * k // ((m * k + k * n + m * n) * b),
    }),
    Catalogue("can_fuse", check_can_fuse, reference_can_fuse, {
        "no shape test": lambda g, p, c: fuse_rule(g, p, c, shape=False),
        "no graph-output test": lambda g, p, c: fuse_rule(g, p, c, outputs=False),
        "len(users) == 1 (wrong for x * x)": lambda g, p, c: fuse_rule(g, p, c, readers="one"),
        "consumer among the readers (a value read twice fused)": lambda g, p, c: fuse_rule(g, p, c, readers="any"),
        "OP_CLASS 'elementwise' instead of FUSABLE (fuses the mask)":
            lambda g, p, c: fuse_rule(g, p, c, ops=ELEMENTWISE_CLASS),
        "only the producer's op tested": lambda g, p, c: fuse_rule(g, p, c, consumer_op=False),
        "ops only, nothing about readers, outputs or shapes":
            lambda g, p, c: g.node(p).op in FUSABLE and g.node(c).op in FUSABLE,
    }),
    Catalogue("assign_offsets", check_assign_offsets, lambda ivs: plan_greedy_by_size(ivs, alignment=1), {
        "everything at offset 0": lambda ivs: {iv.name: 0 for iv in ivs},
        "end to end (valid, no reuse)": end_to_end,
        "end exclusive (tensors meeting at a step share memory)":
            lambda ivs: greedy_plan(ivs, touching_overlap=False),
        "first gap taken even when too small": lambda ivs: greedy_plan(ivs, fit=False),
        "the gap search's cursor steps back past a longer block (overlaps it)":
            lambda ivs: greedy_plan(ivs, cursor_max=False),
        "first fit in order of start (valid, wasteful)":
            lambda ivs: greedy_plan(ivs, key=lambda iv: (iv.start, iv.name)),
        "the last tensor forgotten": lambda ivs: {k: v for k, v in list(plan_greedy_by_size(ivs, 1).items())[:-1]},
    }),
]



def fuse_with(nodes, outputs, *, shape=True, keep_outputs=True, readers="only", max_size=None, inputs="outside",
              name="last"):
    """A greedy fusion pass with one of its parts left out or done wrong (the catalogue's wrong answers)."""
    readers_of = {}
    for node in nodes:
        for i in node["inputs"]:
            readers_of.setdefault(i, []).append(node["name"])
    by_name = {n["name"]: n for n in nodes}
    group_of, groups = {}, []
    for node in nodes:
        if node["op"] not in FUSABLE:
            continue
        joinable = []
        for p in dict.fromkeys(node["inputs"]):
            users = readers_of[p]
            ok = {"only": set(users) == {node["name"]}, "one": len(users) == 1, "any": True}[readers]
            if (p in group_of and ok and (tuple(by_name[p]["shape"]) == tuple(node["shape"]) or not shape)
                    and (p not in outputs or not keep_outputs)
                    and (max_size is None or len(groups[group_of[p]]) < max_size)):
                joinable.append(group_of[p])
        if joinable:
            target = joinable[0]
            for other in dict.fromkeys(joinable[1:]):
                if other != target:
                    for member in groups[other]:
                        group_of[member] = target
                    groups[target] += groups[other]
                    groups[other] = []
            groups[target].append(node["name"])
            group_of[node["name"]] = target
        else:
            group_of[node["name"]] = len(groups)
            groups.append([node["name"]])
    order = {n["name"]: k for k, n in enumerate(nodes)}
    groups = [sorted(g, key=order.get) for g in groups if len(g) > 1]
    head = {g[-1]: g for g in groups}
    inside = {m for g in groups for m in g[:-1]}
    out = []
    for node in nodes:
        if node["name"] in inside:
            continue
        if node["name"] in head:
            members = head[node["name"]]
            reads = {"outside": [i for m in members for i in by_name[m]["inputs"] if i not in members],
                     "first": by_name[members[0]]["inputs"],
                     "all": [i for m in members for i in by_name[m]["inputs"]]}[inputs]
            node = {"name": members[-1] if name == "last" else members[0], "op": "fused",
                    "inputs": list(dict.fromkeys(reads)), "shape": node["shape"],
                    "body": [by_name[m] for m in members]}
        out.append(node)
    return out


def silu_with(nodes, outputs, *, orders=2, same_x=True, readers=True, keep_outputs=True, drop="dead",
              name="mul"):
    """A SiLU rewrite with one of its parts left out or done wrong."""
    readers_of = {}
    for node in nodes:
        for i in node["inputs"]:
            readers_of.setdefault(i, []).append(node["name"])
    by_name = {n["name"]: n for n in nodes}
    replaced, dropped = {}, set()
    for node in nodes:
        if node["op"] != "mul":
            continue
        a, b = node["inputs"]
        for s, x in ((b, a), (a, b))[:orders]:
            sig = by_name[s]
            if (sig["op"] == "sigmoid" and (sig["inputs"][0] == x or not same_x)
                    and (readers_of[s] == [node["name"]] or not readers) and (s not in outputs or not keep_outputs)):
                replaced[node["name"]] = {"name": node["name"] if name == "mul" else s, "op": "silu",
                                          "inputs": [x], "shape": node["shape"]}
                if drop == "dead" and readers_of[s] == [node["name"]] and s not in outputs:
                    dropped.add(s)
                elif drop == "always":
                    dropped.add(s)
                break
    return [replaced.get(n["name"], n) for n in nodes if n["name"] not in dropped]


CATALOGUES += [
    Catalogue("fuse_graph", check_fuse_graph, reference_fuse_graph, {
        "no fusion at all": lambda nodes, outputs: nodes,
        "ignores shapes (a vector fused into a matrix loop)": lambda n, o: fuse_with(n, o, shape=False),
        "ignores graph outputs": lambda n, o: fuse_with(n, o, keep_outputs=False),
        "len(readers) == 1 (x * x left unfused)": lambda n, o: fuse_with(n, o, readers="one"),
        "fuses a value another kernel still reads": lambda n, o: fuse_with(n, o, readers="any"),
        "pairs only (a chain of three makes two kernels)": lambda n, o: fuse_with(n, o, max_size=2),
        "the fused node reads its first member's inputs only": lambda n, o: fuse_with(n, o, inputs="first"),
        "every read listed as an input, the group's own values too": lambda n, o: fuse_with(n, o, inputs="all"),
        "the fused node named after its first member": lambda n, o: fuse_with(n, o, name="first"),
    }),
    Catalogue("replace_silu", check_replace_silu, reference_replace_silu, {
        "no rewrite": lambda nodes, outputs: nodes,
        "x * sigmoid(x) only, not sigmoid(x) * x": lambda n, o: silu_with(n, o, orders=1),
        "any product with a sigmoid (of another tensor too)": lambda n, o: silu_with(n, o, same_x=False),
        "a sigmoid read elsewhere is dropped anyway": lambda n, o: silu_with(n, o, readers=False, drop="always"),
        "a sigmoid read elsewhere: rewritten, sigmoid kept": lambda n, o: silu_with(n, o, readers=False),
        "a sigmoid the caller wants: rewritten, sigmoid kept": lambda n, o: silu_with(n, o, keep_outputs=False),
        "the dead sigmoid left in the graph": lambda n, o: silu_with(n, o, drop="never"),
        "the silu node named after the sigmoid": lambda n, o: silu_with(n, o, name="sigmoid"),
    }),
]


def schedule_with(durations, deps, n_workers, *, use_deps=True, workers=None, pick="index", ties=True,
                  worker_pick="lowest", in_order=False, minus_one=False):
    """An event simulation of the worker pool with one of its rules left out or done wrong."""
    n = len(durations)
    w_count = n if workers == "unlimited" else (1 if workers == "one" else n_workers)
    needs = {t: {a for a, b in deps if b == t} if use_deps else set() for t in range(n)}
    ready_since = {t: 0 for t in range(n) if not needs[t]}
    free, running, rows, done, now, issued = list(range(w_count)), [], {}, set(), 0, 0
    while len(rows) < n:
        while free and ready_since:
            order = sorted(ready_since, key=lambda t: (ready_since[t], t) if pick == "fifo" else t)
            task = order[0]
            if in_order and task != issued:
                break
            if worker_pick == "round robin":
                if task % w_count not in free:
                    break
                worker = task % w_count
            else:
                worker = min(free)
            free.remove(worker)
            del ready_since[task]
            rows[task] = (task, worker, now, now + durations[task] - (1 if minus_one else 0))
            running.append(task)
            issued += 1
        now = min(rows[t][3] for t in running)
        finished = sorted((t for t in running if rows[t][3] == now), key=lambda t: rows[t][1])
        for task in finished[: None if ties else 1]:
            running.remove(task)
            free.append(rows[task][1])
            done.add(task)
            for t in range(n):
                if t not in rows and t not in ready_since and needs[t] and needs[t] <= done:
                    ready_since[t] = now
    return [rows[t] for t in range(n)]


CATALOGUES.append(Catalogue("dynamic_schedule", check_dynamic_schedule, list_schedule, {
    "ignores deps": lambda d, deps, w: schedule_with(d, deps, w, use_deps=False),
    "one worker whatever n_workers": lambda d, deps, w: schedule_with(d, deps, w, workers="one"),
    "a worker per task (n_workers ignored)": lambda d, deps, w: schedule_with(d, deps, w, workers="unlimited"),
    "first ready first (FIFO), not lowest index": lambda d, deps, w: schedule_with(d, deps, w, pick="fifo"),
    "simultaneous finishes handled one at a time": lambda d, deps, w: schedule_with(d, deps, w, ties=False),
    "task i always on worker i % n_workers (static)":
        lambda d, deps, w: schedule_with(d, deps, w, worker_pick="round robin"),
    "tasks issued in index order (no overtaking)": lambda d, deps, w: schedule_with(d, deps, w, in_order=True),
    "end = start + duration - 1": lambda d, deps, w: schedule_with(d, deps, w, minus_one=True),
}))
test_reference_passes_every_seed, test_wrong_fails_every_seed = catalogue_tests(CATALOGUES)
