"""Pipeline parallelism (PP): partition the layers into stages, stream micro-batches through them.

A batch is split into m micro-batches; device d of p holds a contiguous slice of layers. Schedules
(op lists per device, then simulated with per-op times t_f and t_b):

* **GPipe** (Huang et al. 2019): all m forwards, then all m backwards. Stashes m micro-batches.
* **1F1B** (PipeDream-Flush, Narayanan et al. 2021a): device d (0 = first stage) runs p−d−1 warm-up
  forwards, then alternates one forward and one backward. Same bubble as GPipe, but at most p micro-batches stashed.
* **interleaved 1F1B** (Narayanan et al. 2021b, Megatron-LM §2.2.2): each device holds v model
  *chunks* (virtual stages d, d+p, …); the bubble shrinks by v at the cost of v× more p2p sends.

Idle ("bubble") fraction of the total time, with t_f, t_b any per-micro-batch stage times:

    GPipe, 1F1B:   (p − 1) / (m + p − 1)          interleaved:  (p − 1) / (v·m + p − 1)

Megatron's paper quotes bubble time / ideal time instead: (p − 1)/m and (p − 1)/(v·m).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.nn import mse_loss
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.model import _check_blocks, block_backward, block_forward
from mlsys_lab.parallelism.timeline import Event
from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_type

SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class Op:
    kind: str  # "F" or "B"
    microbatch: int
    chunk: int = 0

    def __post_init__(self) -> None:  # cheap on the common path: a schedule lists up to 10**6 of these
        if not isinstance(self.kind, str) or self.kind not in ("F", "B"):
            raise ValueError(f"kind must be 'F' (forward) or 'B' (backward); got {self.kind!r:.40}")
        if type(self.microbatch) is not int or self.microbatch < 0:
            check_int("microbatch", self.microbatch, low=0)
        if type(self.chunk) is not int or self.chunk < 0:
            check_int("chunk", self.chunk, low=0)


MAX_SIMULATED_OPS = 10**6  # p · m · v forward ops a simulated schedule may list (each is a Python object)


def _check(n_stages, n_microbatches, schedule, n_chunks, simulated: bool = True):
    p = check_int("n_stages", n_stages, low=1)
    m = check_int("n_microbatches", n_microbatches, low=1)
    check_choice("schedule", schedule, SCHEDULES)
    v = check_int("n_chunks", n_chunks, low=1)
    if schedule != "interleaved" and v != 1:
        raise ValueError(f"n_chunks must be 1 for schedule={schedule!r} (only 'interleaved' uses chunks); "
                         f"got {v}")
    if schedule == "interleaved" and v > 1 and m % p:
        raise ValueError(f"n_microbatches must be a multiple of n_stages={p} for the interleaved schedule; "
                         f"got {m}")
    if simulated and p * m * v > MAX_SIMULATED_OPS:
        raise ValueError(f"n_stages · n_microbatches · n_chunks must be at most {MAX_SIMULATED_OPS} for a simulated "
                         f"schedule (one op each); got n_stages={p}, n_microbatches={m}, n_chunks={v}")
    return p, m, v


def pipeline_bubble_fraction(n_stages: int, n_microbatches: int, schedule: str = "gpipe",
                             n_chunks: int = 1) -> float:
    """Idle fraction of total time: (p−1)/(m+p−1), or (p−1)/(v·m+p−1) for the interleaved schedule."""
    p, m, v = _check(n_stages, n_microbatches, schedule, n_chunks, simulated=False)
    return (p - 1) / (v * m + p - 1)


def schedule_ops(n_stages: int, n_microbatches: int, schedule: str = "1f1b",
                 n_chunks: int = 1) -> list[list[Op]]:
    """The ordered op list of each device (what each GPU executes, in order)."""
    p, m, v = _check(n_stages, n_microbatches, schedule, n_chunks)
    orders = []
    for d in range(p):
        if schedule == "gpipe":
            orders.append([Op("F", i) for i in range(m)] + [Op("B", i) for i in range(m)])
            continue
        total = m * v
        # warm-up forwards: p−d−1 for 1F1B; Megatron-LM's count for the interleaved schedule
        warmup = min(p - d - 1, m) if v == 1 else min((p - d - 1) * 2 + (v - 1) * p, total)
        ops = [_nth_op("F", k, p, v) for k in range(warmup)]
        for i in range(total - warmup):
            ops += [_nth_op("F", warmup + i, p, v), _nth_op("B", i, p, v)]
        ops += [_nth_op("B", k, p, v) for k in range(total - warmup, total)]
        orders.append(ops)
    return orders


def _nth_op(kind: str, k: int, p: int, v: int) -> Op:
    """The k-th forward (or backward) of a device: micro-batches in groups of p, chunk by chunk
    (backwards visit the chunks in reverse). With v = 1 this is micro-batch k, chunk 0."""
    chunk = (k // p) % v
    return Op(kind, (k // (p * v)) * p + k % p, chunk if kind == "F" else v - 1 - chunk)


def simulate_schedule(n_stages: int, n_microbatches: int, schedule: str = "1f1b", n_chunks: int = 1,
                      forward_s: float = 1.0, backward_s: float = 2.0, p2p_s: float = 0.0) -> list[Event]:
    """Run a named schedule's op lists (:func:`schedule_ops`) on p simulated devices: :func:`simulate_ops`."""
    p, m, v = _check(n_stages, n_microbatches, schedule, n_chunks)
    return simulate_ops(schedule_ops(p, m, schedule, v), v, forward_s, backward_s, p2p_s)


def simulate_ops(orders: list[list[Op]], n_chunks: int = 1, forward_s: float = 1.0, backward_s: float = 2.0,
                 p2p_s: float = 0.0) -> list[Event]:
    """Run any op lists on p = len(orders) simulated devices; each op starts when its device is free and its
    input is ready.

    Forward of chunk c on device d is virtual stage k = c·p + d; it needs forward k−1 of the same
    micro-batch (+ ``p2p_s``); backward k needs backward k+1 (or forward k at the last virtual stage).
    Returns one :class:`Event` per op on stream ``"stage d"``; op times are per chunk (t/v). An order in
    which some op waits for one that can never run raises ``RuntimeError`` (the schedule deadlocks).
    """
    v = check_int("n_chunks", n_chunks, low=1)
    tf = check_finite("forward_s", forward_s, low=0.0, low_inclusive=False) / v
    tb = check_finite("backward_s", backward_s, low=0.0, low_inclusive=False) / v
    p2p_s = check_finite("p2p_s", p2p_s, low=0.0)
    check_type("orders", orders, (list, tuple))
    for order in orders:
        if not isinstance(order, (list, tuple)) or not all(isinstance(op, Op) for op in order):
            raise TypeError("orders must be one list of Op per device (as schedule_ops returns); got an entry "
                            f"{type(order).__name__} {order!r:.60}")
    p = check_int("len(orders)", len(orders), low=1)
    last = p * v - 1

    def step_of(d: int, op: Op) -> PipelineStep:
        k = op.chunk * p + d  # the virtual stage
        if op.kind == "F":
            needs = ("F", op.microbatch, k - 1) if k > 0 else None
        else:
            needs = ("B", op.microbatch, k + 1) if k < last else ("F", op.microbatch, k)
        return PipelineStep((op.kind, op.microbatch, k), needs, tf if op.kind == "F" else tb,
                            p2p_s if needs is not None and needs[2] != k else 0.0,
                            f"{op.kind}{op.microbatch}.{op.chunk}", "forward" if op.kind == "F" else "backward",
                            op.microbatch, op.chunk)

    return run_orders(orders, step_of)


@dataclass(frozen=True)
class PipelineStep:
    """What one op of a pipeline's op lists does: it completes ``key``, waits for ``needs`` (plus ``delay``, a
    point-to-point transfer), runs ``seconds``, and is drawn as an :class:`Event` with the rest."""

    key: tuple
    needs: tuple | None
    seconds: float
    delay: float
    label: str
    kind: str
    microbatch: int
    chunk: int = 0

    def __post_init__(self) -> None:
        check_type("key", self.key, tuple)
        if self.needs is not None:
            check_type("needs", self.needs, tuple)
        check_finite("seconds", self.seconds, low=0.0)
        check_finite("delay", self.delay, low=0.0)
        check_type("label", self.label, str)
        check_type("kind", self.kind, str)
        check_int("microbatch", self.microbatch, low=0)
        check_int("chunk", self.chunk, low=0)


def run_orders(orders, step_of) -> list[Event]:
    """The event loop of every pipeline simulator: each device runs its op list in order; an op starts when its
    device is free and the op it needs has ended (``step_of(d, op)`` -> :class:`PipelineStep`, the schedule's
    dependency rules). One :class:`Event` per op on stream "stage d"; an op that waits for one that can never run
    raises ``RuntimeError`` (the schedule deadlocks)."""
    check_type("orders", orders, (list, tuple))
    if not all(isinstance(order, (list, tuple)) for order in orders):
        raise TypeError(f"orders must be one list of ops per device; got {orders!r:.60}")
    if not callable(step_of):
        raise TypeError(f"step_of must be a function (device, op) -> PipelineStep; got {type(step_of).__name__}")
    p = len(orders)
    done: dict[tuple, float] = {}
    nxt, free, events = [0] * p, [0.0] * p, []
    while any(nxt[d] < len(orders[d]) for d in range(p)):
        progressed = False
        for d in range(p):
            while nxt[d] < len(orders[d]):
                step = step_of(d, orders[d][nxt[d]])
                if not isinstance(step, PipelineStep):
                    raise TypeError(f"step_of must return a PipelineStep; got {type(step).__name__}")
                if step.needs is not None and step.needs not in done:
                    break
                start = max(free[d], 0.0 if step.needs is None else done[step.needs] + step.delay)
                end = start + step.seconds
                done[step.key] = end
                events.append(Event(f"stage {d}", start, end, step.label, step.kind, step.microbatch, step.chunk))
                free[d], nxt[d], progressed = end, nxt[d] + 1, True
        if not progressed:
            raise RuntimeError("the schedule deadlocked: an op waits for one that can never run")
    return events


def peak_stashed_microbatches(n_stages: int, n_microbatches: int, schedule: str = "1f1b",
                              n_chunks: int = 1) -> list[float]:
    """Per device, the most micro-batches whose activations are held at once (forward done, backward not).

    Counted from the op order, in units of one micro-batch through a whole stage (a chunk is 1/v of it).
    """
    p, m, v = _check(n_stages, n_microbatches, schedule, n_chunks)
    return [stashed_peak(ops) / v for ops in schedule_ops(p, m, schedule, v)]


def stashed_peak(ops: list[Op]) -> int:
    """The most forwards of one device's op list that are done and whose backward is not (in chunk units)."""
    check_type("ops", ops, (list, tuple))
    if not all(isinstance(op, Op) for op in ops):
        raise TypeError("ops must be a list of Op (kind 'F' or 'B', microbatch, chunk), as schedule_ops returns")
    live = peak = 0
    for op in ops:
        live += 1 if op.kind == "F" else -1
        peak = max(peak, live)
    return peak


def pipeline_loss_and_grads(x, target, blocks: list[dict], head_dim: int, n_stages: int, n_microbatches: int,
                            schedule: str = "1f1b", n_chunks: int = 1, log: comm.CommLog | None = None):
    """Execute a real pipelined step in the simulated schedule's order.

    Layers are partitioned into p·v equal virtual stages; virtual stage k lives on device k mod p.
    Activations cross stages with :func:`comm.send`. Returns (loss, grads, measured peak stashed
    micro-batch-stages per device); gradients are accumulated over micro-batches (no update between).
    """
    check_array("x", x, ndim=3, kinds="f")
    check_array("target", target, ndim=3, kinds="f")
    _check_blocks("blocks", blocks)
    check_int("head_dim", head_dim, low=1)
    p, m, v = _check(n_stages, n_microbatches, schedule, n_chunks)
    n_virtual = p * v
    if len(blocks) % n_virtual:
        raise ValueError(f"n_stages·n_chunks={n_virtual} must divide the number of layers {len(blocks)}")
    if x.shape[0] % m:
        raise ValueError(f"n_microbatches must divide the batch size {x.shape[0]}; got {m}")
    per = len(blocks) // n_virtual
    xs, ts = comm.partition(x, m), comm.partition(target, m)                  # m × (b/m, s, d)
    inputs, caches, dout = {}, {}, {}
    grads = [{k: 0.0 for k in blk} for blk in blocks]
    live, peak, loss = [0] * p, [0] * p, 0.0
    for event in sorted(simulate_schedule(p, m, schedule, v), key=lambda e: (e.start, e.stream)):
        d = int(event.stream.split()[1])
        kind, mb, k = event.label[0], event.microbatch, event.chunk * p + d
        layers = range(k * per, (k + 1) * per)
        if kind == "F":
            h = xs[mb] if k == 0 else comm.send(inputs.pop(("act", mb, k)), log)
            stage_caches = []
            for i in layers:
                h, cache = block_forward(h, blocks[i], head_dim)
                stage_caches.append(cache)
            caches[(mb, k)] = stage_caches
            live[d] += 1
            if k < n_virtual - 1:
                inputs[("act", mb, k + 1)] = h
            else:
                mb_loss, dy = mse_loss(h, ts[mb])
                loss += mb_loss / m
                dout[(mb, k)] = dy / m                                          # global mean over m
        else:
            dy = dout.pop((mb, k)) if k == n_virtual - 1 else comm.send(dout.pop((mb, k)), log)
            for i, cache in zip(reversed(layers), reversed(caches.pop((mb, k))), strict=True):
                dy, g = block_backward(dy, cache)
                for name in g:
                    grads[i][name] = grads[i][name] + g[name]
            live[d] -= 1
            if k > 0:
                dout[(mb, k - 1)] = dy
        peak[d] = max(peak[d], live[d])
    return loss, grads, [pk / v for pk in peak]
