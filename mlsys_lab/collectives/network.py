"""Point-to-point messages between simulated ranks, counted byte by byte.

A :meth:`Network.exchange` call is one synchronous *round* under the α-β model's usual rule
(Hockney 1994; Thakur, Rabenseifner & Gropp 2005): a rank sends at most one message and receives at
most one message per round (single-port, full-duplex). A round costs α + β·(largest message in it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mlsys_lab.validation import check_int, check_number


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


@dataclass
class CollectiveResult:
    """What a simulated collective returns: one output per rank and the traffic it took."""

    outputs: list[np.ndarray | None]  # None where a rank receives nothing (non-root of reduce)
    bytes_sent: np.ndarray  # int64, per rank
    bytes_received: np.ndarray  # int64, per rank
    steps: int  # synchronous rounds
    round_max_bytes: tuple[int, ...]
    snapshots: list[tuple[str, int, list[np.ndarray]]] = field(default_factory=list)  # (phase, step, buffers)

    def time_seconds(self, alpha: float, beta: float) -> float:
        """α-β time: steps·α + β·Σ largest message of each round (β in seconds per byte)."""
        check_number("alpha", alpha, low=0)
        check_number("beta", beta, low=0)
        return self.steps * alpha + beta * float(sum(self.round_max_bytes))


def make_result(outputs, net: Network, snapshots=None) -> CollectiveResult:
    """Package a collective's outputs with the traffic ``net`` counted."""
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
