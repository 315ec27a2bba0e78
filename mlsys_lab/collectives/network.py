"""Point-to-point messages between simulated ranks, counted byte by byte.

A :meth:`Network.exchange` call is one synchronous *round* under the α-β model's usual rule
(Hockney 1994; Thakur, Rabenseifner & Gropp 2005): a rank sends at most one message and receives at
most one message per round (single-port, full-duplex). A round costs α + β·(largest message in it).
:class:`TwoLevelNetwork` puts the ranks on nodes and books every byte to NVLink or to the NICs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsys_lab.validation import check_array, check_bool, check_int, check_number, check_sequence, check_type


def array_module(*arrays):
    """NumPy, or CuPy when any of ``arrays`` lives on the GPU (:func:`mlsys_lab.backend.module_of`).

    The backend is imported here, not at the top: ``python -m mlsys_lab.collectives.nccl_ring``
    imports this package before it chooses its GPU, and the backend takes a device when imported.
    """
    from mlsys_lab.backend import module_of

    return module_of(*arrays)


class Network:
    """Point-to-point links between ``n_ranks`` simulated ranks that count every byte."""

    def __init__(self, n_ranks: int) -> None:
        self.n_ranks = check_int("n_ranks", n_ranks, low=1)
        self.bytes_sent = np.zeros(self.n_ranks, dtype=np.int64)
        self.bytes_received = np.zeros(self.n_ranks, dtype=np.int64)
        self.round_max_bytes: list[int] = []  # the largest message of each round

    @property
    def steps(self) -> int:
        """Synchronous rounds so far."""
        return len(self.round_max_bytes)

    def exchange(self, messages: list[tuple[int, int, np.ndarray]]) -> list[np.ndarray]:
        """One round: ``messages`` is a list of ``(src, dst, array)``; returns what each dst receives.

        Raises ValueError if a rank sends or receives twice in the round (single-port rule).
        """
        if not messages:
            return []
        sources = [int(src) for src, _, _ in messages]
        destinations = [int(dst) for _, dst, _ in messages]
        for src, dst in zip(sources, destinations, strict=False):
            check_int("src", src, low=0, high=self.n_ranks - 1)
            check_int("dst", dst, low=0, high=self.n_ranks - 1)
            if src == dst:
                raise ValueError(f"a rank cannot send to itself (src = dst = {src})")
        if len(set(sources)) < len(sources) or len(set(destinations)) < len(destinations):
            raise ValueError(
                "in one round each rank may send at most one message and receive at most one "
                f"(sources {sources}, destinations {destinations})"
            )
        received = []
        for src, dst, (_, _, array) in zip(sources, destinations, messages, strict=False):
            array = array_module(array).asarray(array)  # NumPy or CuPy: the message stays where it lives
            if array.dtype.kind not in "biufc":  # a link carries numbers: not bytes, strings or objects
                raise TypeError(f"the message from rank {src} to rank {dst} must be an array of numbers, "
                                f"got dtype {array.dtype}")
            self.bytes_sent[src] += array.nbytes
            self.bytes_received[dst] += array.nbytes
            received.append(array.copy())
        self.round_max_bytes.append(max(int(a.nbytes) for a in received))
        return received

    def time_seconds(self, alpha: float, beta: float) -> float:
        """α-β time of the rounds so far: steps·α + β·Σ max bytes per round (β in seconds per byte)."""
        check_number("alpha", alpha, low=0)
        check_number("beta", beta, low=0)
        return self.steps * alpha + beta * float(sum(self.round_max_bytes))


class TwoLevelNetwork(Network):
    """``n_nodes`` nodes of ``gpus_per_node`` ranks (rank r on node r // g), bytes counted per link class.

    A message between two ranks of one node crosses NVLink (*intra*), any other a NIC (*inter*).
    :meth:`two_level_seconds` prices each round at its slowest class, α_c + β_c·(largest message of class c),
    the sum that :func:`mlsys_lab.collectives.cost.hierarchical_allreduce_time` writes in closed form.
    """

    def __init__(self, n_nodes: int, gpus_per_node: int) -> None:
        self.n_nodes = check_int("n_nodes", n_nodes, low=1, high=4096)
        self.gpus_per_node = check_int("gpus_per_node", gpus_per_node, low=1, high=64)
        super().__init__(self.n_nodes * self.gpus_per_node)
        self.bytes_sent_intra = np.zeros(self.n_ranks, dtype=np.int64)
        self.bytes_sent_inter = np.zeros(self.n_ranks, dtype=np.int64)
        # per round, the largest message of each class, (intra, inter), None where the class carried none
        self.round_max_bytes_by_class: list[tuple[int | None, int | None]] = []

    def node_of(self, rank: int) -> int:
        """The node that ``rank`` sits on: rank // gpus_per_node."""
        return check_int("rank", rank, low=0, high=self.n_ranks - 1) // self.gpus_per_node

    def exchange(self, messages: list[tuple[int, int, np.ndarray]]) -> list[np.ndarray]:
        """One round, as :meth:`Network.exchange`, with each message's bytes booked to its link class."""
        received = super().exchange(messages)
        if received:
            largest: list[int | None] = [None, None]
            for (src, dst, _), data in zip(messages, received, strict=True):
                inter = int(int(src) // self.gpus_per_node != int(dst) // self.gpus_per_node)
                (self.bytes_sent_inter if inter else self.bytes_sent_intra)[int(src)] += data.nbytes
                largest[inter] = max(largest[inter] or 0, int(data.nbytes))
            self.round_max_bytes_by_class.append((largest[0], largest[1]))
        return received

    def two_level_seconds(self, alpha_intra: float, beta_intra: float, alpha_inter: float,
                          beta_inter: float) -> float:
        """Σ over rounds of the slowest class the round used: max_c α_c + β_c·(largest message of class c)."""
        terms = [(check_number("alpha_intra", alpha_intra, low=0), check_number("beta_intra", beta_intra, low=0)),
                 (check_number("alpha_inter", alpha_inter, low=0), check_number("beta_inter", beta_inter, low=0))]
        return float(sum(max(alpha + beta * m for (alpha, beta), m in zip(terms, largest, strict=True)
                             if m is not None) for largest in self.round_max_bytes_by_class))


@dataclass
class CollectiveResult:
    """What a simulated collective returns: one output per rank and the traffic it took."""

    outputs: list[np.ndarray | None]  # None where a rank receives nothing (non-root of reduce)
    bytes_sent: np.ndarray  # int64, per rank
    bytes_received: np.ndarray  # int64, per rank
    steps: int  # synchronous rounds
    round_max_bytes: tuple[int, ...]
    snapshots: list[tuple[str, int, list[np.ndarray]]] = field(default_factory=list)  # (phase, step, buffers)

    def __post_init__(self) -> None:
        # outputs hold whatever the ranks' data summed to (NaN in, NaN out): the container is checked, not values
        check_sequence("outputs", self.outputs, min_size=1)
        for name in ("bytes_sent", "bytes_received"):
            if (check_array(name, getattr(self, name), ndim=1, kinds="iu") < 0).any():
                raise ValueError(f"{name} must hold byte counts >= 0, one per rank")
        check_int("steps", self.steps, low=0)
        for n_bytes in check_sequence("round_max_bytes", self.round_max_bytes):
            check_int("round_max_bytes", n_bytes, low=0)
        if not all(isinstance(s, tuple) and len(s) == 3 for s in check_sequence("snapshots", self.snapshots)):
            raise TypeError("snapshots must hold (phase, step, buffers) tuples")

    def time_seconds(self, alpha: float, beta: float) -> float:
        """α-β time: steps·α + β·Σ largest message of each round (β in seconds per byte)."""
        check_number("alpha", alpha, low=0)
        check_number("beta", beta, low=0)
        return self.steps * alpha + beta * float(sum(self.round_max_bytes))


def make_result(outputs, net: Network, snapshots=None) -> CollectiveResult:
    """Package a collective's outputs with the traffic ``net`` counted."""
    check_type("net", net, Network)
    check_sequence("outputs", outputs)
    if snapshots is not None:
        check_sequence("snapshots", snapshots)
    return CollectiveResult(
        list(outputs),
        net.bytes_sent.copy(),
        net.bytes_received.copy(),
        net.steps,
        tuple(net.round_max_bytes),
        snapshots or [],
    )


def check_buffers(buffers, same_length: bool = True) -> list[np.ndarray]:
    """One 1-D array per rank (equal length and dtype unless ``same_length`` is False), else ValueError.

    NumPy arrays (and lists) come back as NumPy arrays, CuPy arrays stay on the GPU.
    """
    check_bool("same_length", same_length)
    if not isinstance(buffers, (list, tuple)) or len(buffers) < 1:
        raise ValueError(
            f"buffers must be a non-empty list with one 1-D array per rank; got {type(buffers).__name__}"
        )
    arrays = [array_module(b).asarray(b) for b in buffers]
    for rank, array in enumerate(arrays):
        if array.ndim != 1:
            raise ValueError(f"buffers[{rank}] must be a 1-D array; got shape {array.shape}")
    if same_length and len({(a.shape, a.dtype) for a in arrays}) > 1:
        raise ValueError(
            "buffers must all have the same length and dtype; got "
            f"{sorted({(a.shape[0], str(a.dtype)) for a in arrays})}"
        )
    return arrays
