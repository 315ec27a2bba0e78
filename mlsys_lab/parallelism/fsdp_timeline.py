"""FSDP's step as a timeline: prefetching the next layer's all-gather, and hybrid sharding (HSDP).

Zhao et al. 2023 (PyTorch FSDP) §3.3–3.4. Per layer i of P_i parameter bytes, forward compute f_i and backward
2·f_i seconds, one rank of a shard group of G GPUs runs on two streams, "compute" and "comm" (collectives
in the order they are issued, one at a time):

* **no prefetch**: the all-gather of layer i is issued when layer i is needed, so compute waits for every
  gather; at most one layer is gathered (held from its gather to the end of its compute);
* **prefetch** (``forward_prefetch``, ``BACKWARD_PRE``): the gather of the next layer is issued when this
  layer's compute starts, so it runs under that compute; two layers are gathered at once;
* **hybrid sharding** (``HYBRID_SHARD``): shard inside a node (G = GPUs per node, gathers over NVLink) and
  replicate across the n nodes: after each reduce-scatter the gradient shard (P_i/G) is all-reduced with
  the same shard on the other nodes. Model states take 16Ψ/G bytes per GPU instead of 16Ψ/(n·G).

A collective's time is lesson 07's α-β cost (:func:`mlsys_lab.collectives.cost.collective_time`): a ring
across nodes runs on ``n_channels`` NICs at once, capped by NVLink (the model of
:func:`mlsys_lab.collectives.cost.flat_ring_allreduce_time`).
"""

from __future__ import annotations

from dataclasses import dataclass

from mlsys_lab.collectives.cost import collective_time
from mlsys_lab.parallelism.timeline import Event
from mlsys_lab.validation import check_bool, check_finite, check_int, check_positive, check_sequence, check_type


@dataclass(frozen=True)
class Interconnect:
    """Links of a cluster: NVLink inside a node, ``n_channels`` NICs per node between nodes (bytes/s, s)."""

    gpus_per_node: int = 8
    intra_bytes_per_s: float = 450e9      # NVLink 4, each way (H200)
    inter_bytes_per_s: float = 50e9       # one 400 Gb/s NIC
    n_channels: int = 8                   # NICs per node a ring uses side by side
    intra_latency_s: float = 3e-6
    inter_latency_s: float = 10e-6

    def __post_init__(self) -> None:
        check_int("gpus_per_node", self.gpus_per_node, low=1)
        check_positive("intra_bytes_per_s", self.intra_bytes_per_s)
        check_positive("inter_bytes_per_s", self.inter_bytes_per_s)
        check_int("n_channels", self.n_channels, low=1)
        check_finite("intra_latency_s", self.intra_latency_s, low=0.0)
        check_finite("inter_latency_s", self.inter_latency_s, low=0.0)

    def collective_seconds(self, collective: str, n_bytes: float, n_gpus: int) -> float:
        """One collective of ``n_bytes`` (the full vector) over ``n_gpus`` consecutive GPUs (a node first)."""
        if n_gpus <= self.gpus_per_node:
            return float(collective_time(collective, n_bytes, n_gpus, self.intra_latency_s,
                                         1 / self.intra_bytes_per_s))
        beta = max(1 / (self.inter_bytes_per_s * self.n_channels), 1 / self.intra_bytes_per_s)
        return float(collective_time(collective, n_bytes, n_gpus, self.inter_latency_s, beta))


def fsdp_timeline(layer_param_bytes, layer_forward_s, n_nodes: int, net: Interconnect = Interconnect(),
                  prefetch: bool = True, hybrid: bool = False) -> tuple[list[Event], float]:
    """One FSDP step on one rank: (events on "compute" and "comm", peak gathered parameter bytes).

    ``layer_param_bytes``, ``layer_forward_s``: per layer, forward order. Forward runs layers 0 … L−1, backward
    L−1 … 0 at twice the forward time; full sharding spans all n_nodes·G GPUs, hybrid the G GPUs of a node.
    """
    sizes = [check_positive("layer_param_bytes[i]", b) for b in check_sequence("layer_param_bytes",
                                                                                 layer_param_bytes, min_size=1)]
    times = [check_positive("layer_forward_s[i]", t) for t in check_sequence("layer_forward_s", layer_forward_s,
                                                                           min_size=1)]
    if len(sizes) != len(times):
        raise ValueError(f"layer_param_bytes and layer_forward_s must have one entry per layer; got "
                         f"{len(sizes)} and {len(times)}")
    nodes = check_int("n_nodes", n_nodes, low=1)
    check_type("net", net, Interconnect)
    check_bool("prefetch", prefetch)
    check_bool("hybrid", hybrid)
    group = net.gpus_per_node if hybrid else nodes * net.gpus_per_node
    events: list[Event] = []
    clock = {"compute": 0.0, "comm": 0.0}
    live: list[tuple[float, float, float]] = []                # (gathered from, freed at, bytes)

    def comm(kind: str, label: str, n_bytes: float, ranks: int, issued: float) -> float:
        start = max(clock["comm"], issued)
        end = start + net.collective_seconds(kind, n_bytes, ranks)
        events.append(Event("comm", start, end, label, kind))
        clock["comm"] = end
        return end

    def run_pass(order: list[int], factor: float, kind: str) -> None:
        gathered = {}
        if prefetch:
            gathered[order[0]] = (clock["compute"], comm("all_gather", f"AG{order[0]}", sizes[order[0]], group,
                                                         clock["compute"]))
        for j, i in enumerate(order):
            if i not in gathered:                              # no prefetch: gather when needed
                gathered[i] = (clock["compute"], comm("all_gather", f"AG{i}", sizes[i], group, clock["compute"]))
            issued, ready = gathered[i]
            start = max(clock["compute"], ready)
            if prefetch and j + 1 < len(order):                # the next layer's gather runs under this compute
                nxt = order[j + 1]
                gathered[nxt] = (start, comm("all_gather", f"AG{nxt}", sizes[nxt], group, start))
            end = start + factor * times[i]
            events.append(Event("compute", start, end, f"{kind[0].upper()}{i}", kind))
            clock["compute"] = end
            live.append((issued, end, sizes[i]))
            if kind == "backward":
                done = comm("reduce_scatter", f"RS{i}", sizes[i], group, end)
                if hybrid and nodes > 1:                       # the shard's all-reduce across the nodes
                    shard = sizes[i] / net.gpus_per_node
                    beta = 1 / net.inter_bytes_per_s           # each GPU's own NIC
                    seconds = float(collective_time("all_reduce", shard, nodes, net.inter_latency_s, beta))
                    start_ar = max(clock["comm"], done)
                    events.append(Event("comm", start_ar, start_ar + seconds, f"AR{i}", "all_reduce"))
                    clock["comm"] = start_ar + seconds

    run_pass(list(range(len(sizes))), 1.0, "forward")
    run_pass(list(reversed(range(len(sizes)))), 2.0, "backward")
    instants = sorted({t for a, _, _ in live for t in (a,)})
    peak = max(sum(b for a, f, b in live if a <= t < f) for t in instants)
    return events, float(peak)


def fsdp_state_bytes(n_params: float, n_nodes: int, net: Interconnect = Interconnect(), hybrid: bool = False,
                     bytes_per_param: float = 16.0) -> float:
    """Model-state bytes per GPU, 16Ψ/G (mixed-precision Adam): G = n_nodes·gpus_per_node, or a node for hybrid."""
    psi = check_positive("n_params", n_params)
    nodes = check_int("n_nodes", n_nodes, low=1)
    check_type("net", net, Interconnect)
    check_bool("hybrid", hybrid)
    group = net.gpus_per_node if hybrid else nodes * net.gpus_per_node
    return check_positive("bytes_per_param", bytes_per_param) * psi / group
