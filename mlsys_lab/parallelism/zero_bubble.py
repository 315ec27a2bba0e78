"""Zero-bubble pipeline schedules: the backward split into B (input gradient) and W (weight gradient).

Qi, Wan, Huang, Lin 2023, "Zero Bubble Pipeline Parallelism" (ICLR 2024). A layer's backward is two
computations: B = dL/dx, which the previous stage waits for, and W = dL/dθ, which nobody waits for. A
schedule may run W later, in what would otherwise be bubble. With per-micro-batch stage times T_F, T_B, T_W
(the paper's §3.1):

    1F1B (B and W together)   idle per stage (p − 1)(T_F + T_B + T_W)
    ZB-H1                     idle per stage (p − 1)(T_F + T_B − T_W)      (m ≥ p, T_W ≤ min(T_F, T_B))

(with a longer W this construction idles (p − 1)·max(T_F, T_B): its deferred Ws no longer fit the gaps)

and the same peak activation memory: a micro-batch is held from its F to its W, and no stage holds more than
p (1F1B's first stage holds p; its later stages p − d, ZB-H1's later stages up to p too).

:func:`zb_h1_orders` writes ZB-H1's op lists; :func:`simulate_fbw` runs any F/B/W op lists, with the
dependencies of the pipeline, on p simulated stages (1F1B is the same simulator with B and W fused:
:func:`mlsys_lab.parallelism.pp.simulate_schedule` with ``backward_s = T_B + T_W``).
"""

from __future__ import annotations

from mlsys_lab.parallelism.pp import PipelineStep, run_orders
from mlsys_lab.parallelism.timeline import Event
from mlsys_lab.validation import check_finite, check_int, check_type

KINDS = {"F": "forward", "B": "backward", "W": "weight_grad"}
MAX_OPS = 10**6  # ops a simulated schedule may list (each is a Python object)


def _check_ops(name: str, ops) -> None:
    check_type(name, ops, (list, tuple))
    if not all(isinstance(op, (list, tuple)) and len(op) == 2 and op[0] in KINDS for op in ops):
        raise TypeError(f"{name} must be a list of (kind, micro-batch) pairs, kind in F, B, W; got {ops!r:.60}")


def _check_times(forward_s, input_grad_s, weight_grad_s) -> tuple[float, float, float]:
    return (check_finite("forward_s", forward_s, low=0.0, low_inclusive=False),
            check_finite("input_grad_s", input_grad_s, low=0.0, low_inclusive=False),
            check_finite("weight_grad_s", weight_grad_s, low=0.0, low_inclusive=False))


def _dependency(kind: str, mb: int, d: int, p: int) -> tuple[str, int, int] | None:
    if kind == "F":
        return ("F", mb, d - 1) if d > 0 else None
    if kind == "B":
        return ("B", mb, d + 1) if d < p - 1 else ("F", mb, d)
    return ("B", mb, d)                                                    # W needs this stage's B


def simulate_fbw(orders: list[list[tuple[str, int]]], forward_s: float = 1.0, input_grad_s: float = 1.0,
                 weight_grad_s: float = 1.0) -> list[Event]:
    """Run per-stage op lists of ("F" | "B" | "W", micro-batch); each op starts when its stage is free and its
    input is ready (F after F of the previous stage, B after B of the next stage, W after this stage's B).

    Returns one :class:`Event` per op on stream "stage d"; raises RuntimeError if the orders deadlock.
    """
    times = dict(zip("FBW", _check_times(forward_s, input_grad_s, weight_grad_s), strict=True))
    check_type("orders", orders, (list, tuple))
    p = check_int("len(orders)", len(orders), low=1)
    for order in orders:
        _check_ops("orders[d]", order)
    check_int("the number of ops", sum(len(order) for order in orders), high=MAX_OPS)

    def step_of(d: int, op: tuple[str, int]) -> PipelineStep:
        kind, mb = op[0], int(op[1])
        return PipelineStep((kind, mb, d), _dependency(kind, mb, d, p), times[kind], 0.0, f"{kind}{op[1]}",
                            KINDS[kind], mb)

    return run_orders(orders, step_of)


def zb_h1_orders(n_stages: int, n_microbatches: int) -> list[list[tuple[str, int]]]:
    """ZB-H1's op lists: stage d runs, for x = 0, 1, …, m + p − 2, the triple (F_x, B_{x−(p−1−d)}, W_{x−(p−1)}),
    leaving out the indices outside 0 … m−1.

    So stage d warms up with p − 1 − d forwards alone (as 1F1B), then d pairs (F, B) whose W is put off, a
    steady state F B W, and a cool-down whose deferred Ws fill what 1F1B leaves idle. A micro-batch is in
    flight from its F to its W: stage 0 holds p at most, like 1F1B's first stage (Qi et al. 2023, Fig. 3).
    """
    p, m = check_int("n_stages", n_stages, low=1), check_int("n_microbatches", n_microbatches, low=1)
    if 3 * p * m > MAX_OPS:
        raise ValueError(f"n_stages · n_microbatches must be at most {MAX_OPS // 3} (3 ops each); got {p}·{m}")
    orders = []
    for d in range(p):
        ops = []
        for x in range(m + p - 1):
            for kind, mb in (("F", x), ("B", x - (p - 1 - d)), ("W", x - (p - 1))):
                if 0 <= mb < m:
                    ops.append((kind, mb))
        orders.append(ops)
    return orders


def in_flight_peak(ops: list[tuple[str, int]]) -> int:
    """The most micro-batches of one stage's op list whose F is done and whose W is not (its activations)."""
    _check_ops("ops", ops)
    live = peak = 0
    for kind, _ in ops:
        live += {"F": 1, "B": 0, "W": -1}[kind]
        peak = max(peak, live)
    return peak


def idle_per_stage_seconds(events: list[Event], n_microbatches: int, forward_s: float = 1.0,
                           input_grad_s: float = 1.0, weight_grad_s: float = 1.0) -> float:
    """Measured bubble: makespan − m·(T_F + T_B + T_W), the time each stage is idle."""
    tf, tb, tw = _check_times(forward_s, input_grad_s, weight_grad_s)
    m = check_int("n_microbatches", n_microbatches, low=1)
    check_type("events", events, (list, tuple))
    if not events or not all(isinstance(e, Event) for e in events):
        raise ValueError("events must be a non-empty list of Event (as simulate_fbw returns)")
    return max(e.end for e in events) - min(e.start for e in events) - m * (tf + tb + tw)


def zb_h1_idle_formula(n_stages: int, forward_s: float = 1.0, input_grad_s: float = 1.0,
                       weight_grad_s: float = 1.0) -> float:
    """The paper's ZB-H1 bubble per stage, (p − 1)(T_F + T_B − T_W), for T_W ≤ min(T_F, T_B) (attained for m ≥ p)."""
    p = check_int("n_stages", n_stages, low=1)
    tf, tb, tw = _check_times(forward_s, input_grad_s, weight_grad_s)
    if tw > min(tf, tb):
        raise ValueError(f"weight_grad_s must be at most min(forward_s, input_grad_s) = {min(tf, tb):g} for the "
                         f"paper's formula; got {tw:g}")
    return (p - 1) * (tf + tb - tw)
