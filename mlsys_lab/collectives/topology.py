"""Network topologies: ring, tree, fat-tree, 2D/3D torus, fully connected.

For n hosts and one link's bandwidth b (bytes/s, per direction):

===============  =================  ======================  =========================
topology         diameter (hops)    links (unit cables)     bisection (links)
===============  =================  ======================  =========================
ring             ⌊n/2⌋              n                       2
tree             2·log2 n           2n − 2                  1 (the root's link)
fat_tree         2·log2 n           n·log2 n                n/2 (links fatten upward)
torus_2d (k²)    2⌊k/2⌋             2n                      2k
torus_3d (k³)    3⌊k/2⌋             3n                      2k²
fully_connected  1                  n(n−1)/2                ⌊n/2⌋·⌈n/2⌉
===============  =================  ======================  =========================

Bisection bandwidth = b × (the fewest links cut when the hosts are split in two equal halves).
``tree`` and ``fat_tree`` are binary trees of switches with the hosts at the leaves; in the fat tree
(Leiserson 1985) a link at level l carries 2^l cables, so the root is no bottleneck. Data centres
build the same full bisection from identical small switches as a folded Clos (Al-Fares et al. 2008).
The graphs are built explicitly, so tests recompute diameter (breadth-first search) and bisection
(brute force over balanced cuts) from the edges.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from mlsys_lab.validation import check_array, check_choice, check_finite, check_int, check_type

TOPOLOGIES = ("ring", "tree", "fat_tree", "torus_2d", "torus_3d", "fully_connected")


@dataclass(frozen=True)
class Topology:
    """A graph of hosts (vertices 0..n_nodes−1) and switches (the vertices after them)."""

    name: str
    n_nodes: int  # hosts
    n_vertices: int  # hosts + switches
    edges: tuple[tuple[int, int, float], ...]  # (u, v, capacity in links)
    positions: np.ndarray  # (n_vertices, 2) for drawing

    def __post_init__(self) -> None:
        check_type("name", self.name, str)
        check_int("n_nodes", self.n_nodes, low=1, high=2**20)
        check_int("n_vertices", self.n_vertices, low=self.n_nodes, high=2**21)
        check_type("edges", self.edges, (tuple, list))
        for edge in self.edges:
            try:
                ok = len(edge) == 3 and all(0 <= int(e) < self.n_vertices for e in edge[:2]) \
                    and 0 < float(edge[2]) < float("inf")
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ValueError(f"edges must be (u, v, capacity) with 0 <= u, v < n_vertices={self.n_vertices} "
                                 f"and a finite capacity > 0; got {edge!r:.60}")
        positions = check_array("positions", self.positions, ndim=2, kinds="fiu", finite=True, min_size=0)
        if positions.shape != (self.n_vertices, 2):
            raise ValueError(f"positions must have shape (n_vertices, 2) = ({self.n_vertices}, 2); "
                             f"got {positions.shape}")

    def segments(self) -> list[tuple[np.ndarray, float]]:
        """(polyline, capacity) pairs for drawing; a torus link that wraps around is drawn as two stubs."""
        lines = []
        for u, v, capacity in self.edges:
            start, end = self.positions[u], self.positions[v]
            step = end - start
            length = float(np.hypot(*step))
            if length <= 1.5 or not self.name.startswith("torus"):
                lines.append((np.array([start, end]), capacity))
            else:  # leave the grid on one side, come back on the other
                outward = 0.35 * step / length
                lines += [
                    (np.array([start, start - outward]), capacity),
                    (np.array([end, end + outward]), capacity),
                ]
        return lines


def _side(n: int, dims: int, name: str) -> int:
    k = round(n ** (1 / dims))
    if k**dims != n or k % 2 or k < 2:
        examples = ", ".join(str(s**dims) for s in (2, 4, 6, 8))
        raise ValueError(
            f"n_nodes for {name} must be k^{dims} with an even side k (allowed: {examples}, ...); got {n}"
        )
    return k


def check_size(topology: str, n_nodes: int) -> int:
    """Validate ``n_nodes`` for ``topology`` (powers of two for trees, k^d with even k for tori)."""
    check_choice("topology", topology, TOPOLOGIES)
    n = check_int("n_nodes", n_nodes, low=2, high=4096)
    if topology == "ring" and n < 3:
        raise ValueError(f"n_nodes for a ring must be >= 3; got {n}")
    if topology in ("tree", "fat_tree") and n & (n - 1):
        raise ValueError(f"n_nodes for {topology} must be a power of two (2, 4, 8, 16, ...); got {n}")
    if topology.startswith("torus"):
        _side(n, int(topology[-2]), topology)
    return n


def diameter(topology: str, n_nodes: int) -> int:
    """Largest number of hops between two hosts (table in the module docstring)."""
    n = check_size(topology, n_nodes)
    if topology == "ring":
        return n // 2
    if topology in ("tree", "fat_tree"):
        return 2 * int(math.log2(n))
    if topology == "fully_connected":
        return 1
    dims = int(topology[-2])
    return dims * (_side(n, dims, topology) // 2)


def link_count(topology: str, n_nodes: int) -> int:
    """Unit-bandwidth links (cables) the topology needs: a proxy for its cost."""
    n = check_size(topology, n_nodes)
    if topology == "ring":
        return n
    if topology == "tree":
        return 2 * n - 2
    if topology == "fat_tree":
        return n * int(math.log2(n))
    if topology == "fully_connected":
        return n * (n - 1) // 2
    return int(topology[-2]) * n


def bisection_links(topology: str, n_nodes: int) -> float:
    """The fewest unit links cut by any split of the hosts into two equal halves."""
    n = check_size(topology, n_nodes)
    if topology == "ring":
        return 2.0
    if topology == "tree":
        return 1.0
    if topology == "fat_tree":
        return n / 2
    if topology == "fully_connected":
        return float((n // 2) * (n - n // 2))
    dims = int(topology[-2])
    return 2.0 * _side(n, dims, topology) ** (dims - 1)


def bisection_bandwidth(topology: str, n_nodes: int, link_bandwidth: float) -> float:
    """Bisection bandwidth in the unit of ``link_bandwidth``: bisection_links × link_bandwidth."""
    check_finite("link_bandwidth", link_bandwidth, low=0, low_inclusive=False)
    return bisection_links(topology, n_nodes) * link_bandwidth


def build(topology: str, n_nodes: int) -> Topology:
    """The explicit graph, with positions for drawing."""
    n = check_size(topology, n_nodes)
    if topology in ("ring", "fully_connected"):
        angle = 2 * np.pi * np.arange(n) / n
        positions = np.stack([np.sin(angle), np.cos(angle)], axis=1)
        pairs = (
            [(i, (i + 1) % n) for i in range(n)]
            if topology == "ring"
            else itertools.combinations(range(n), 2)
        )
        return Topology(topology, n, n, tuple((u, v, 1.0) for u, v in pairs), positions)
    if topology in ("tree", "fat_tree"):
        return _build_tree(topology, n)
    return _build_torus(topology, n)


def _build_tree(topology: str, n: int) -> Topology:
    """Hosts 0..n−1 at the leaves; switch level by level above them, the root last."""
    edges, positions = [], [(i - (n - 1) / 2, 0.0) for i in range(n)]
    level_nodes, level, next_id = list(range(n)), 0, n
    while len(level_nodes) > 1:
        parents = []
        for left, right in zip(level_nodes[0::2], level_nodes[1::2], strict=False):
            capacity = 2.0**level if topology == "fat_tree" else 1.0
            edges += [(left, next_id, capacity), (right, next_id, capacity)]
            positions.append(((positions[left][0] + positions[right][0]) / 2, level + 1.0))
            parents.append(next_id)
            next_id += 1
        level_nodes, level = parents, level + 1
    return Topology(topology, n, next_id, tuple(edges), np.array(positions))


def _build_torus(topology: str, n: int) -> Topology:
    dims = int(topology[-2])
    k = _side(n, dims, topology)
    coords = list(itertools.product(range(k), repeat=dims))
    index = {c: i for i, c in enumerate(coords)}
    edges = []
    for c in coords:  # one link to the +1 neighbour in each dimension, wrapping around
        for d in range(dims):
            neighbour = list(c)
            neighbour[d] = (c[d] + 1) % k
            edges.append((index[c], index[tuple(neighbour)], 1.0))
    grid = np.array(coords, dtype=float)
    if dims == 3:  # an oblique projection: z shifts each layer up and to the right
        positions = np.stack([grid[:, 0] + 0.45 * grid[:, 2], grid[:, 1] + 0.3 * grid[:, 2]], axis=1)
    else:
        positions = grid
    return Topology(topology, n, n, tuple(edges), positions)


def graph_diameter(topo: Topology) -> int:
    """Largest host-to-host hop count, by breadth-first search from every host."""
    check_type("topo", topo, Topology)
    neighbours = [[] for _ in range(topo.n_vertices)]
    for u, v, _ in topo.edges:
        neighbours[u].append(v)
        neighbours[v].append(u)
    longest = 0
    for start in range(topo.n_nodes):
        hops = [-1] * topo.n_vertices
        hops[start] = 0
        queue = deque([start])
        while queue:
            u = queue.popleft()
            for v in neighbours[u]:
                if hops[v] < 0:
                    hops[v] = hops[u] + 1
                    queue.append(v)
        longest = max(longest, max(hops[: topo.n_nodes]))
    return longest


def brute_force_bisection_links(topo: Topology) -> float:
    """Minimum cut over all equal splits of the hosts (switches on either side): small graphs only."""
    check_type("topo", topo, Topology)
    n, n_switches = topo.n_nodes, topo.n_vertices - topo.n_nodes
    if n > 16 or n_switches > 15:
        raise ValueError(f"brute force is for at most 16 hosts and 15 switches; got {n} and {n_switches}")
    edges = np.array([(u, v) for u, v, _ in topo.edges], dtype=np.int64).reshape(-1, 2)  # (n_edges, 2), maybe none
    capacity = np.array([c for _, _, c in topo.edges], dtype=float)
    best = float("inf")
    assignments = list(itertools.product((False, True), repeat=n_switches))
    switch_sides = np.array(assignments, dtype=bool).reshape(len(assignments), n_switches)
    for half in itertools.combinations(range(1, n), n // 2 - 1):  # host 0 always on side 1
        side = np.zeros((len(switch_sides), topo.n_vertices), dtype=bool)
        side[:, [0, *half]] = True
        side[:, n:] = switch_sides
        cut = side[:, edges[:, 0]] != side[:, edges[:, 1]]
        best = min(best, float((cut * capacity).sum(axis=1).min()))
    return best
