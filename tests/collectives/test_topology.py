"""Do the topology formulas agree with the graphs they describe (BFS diameter, brute-force bisection)?"""

import pytest

from mlsys_lab.collectives import topology

SMALL = [
    ("ring", 5),
    ("ring", 8),
    ("ring", 12),
    ("tree", 4),
    ("tree", 8),
    ("fat_tree", 4),
    ("fat_tree", 8),
    ("torus_2d", 4),
    ("torus_2d", 16),
    ("torus_3d", 8),
    ("fully_connected", 6),
    ("fully_connected", 9),
]


@pytest.mark.parametrize(("name", "n"), SMALL + [("torus_3d", 64), ("torus_2d", 36), ("fat_tree", 64)])
def test_diameter_formula_matches_breadth_first_search(name, n):
    assert topology.diameter(name, n) == topology.graph_diameter(topology.build(name, n))


@pytest.mark.parametrize(("name", "n"), SMALL)
def test_bisection_formula_matches_brute_force(name, n):
    assert topology.bisection_links(name, n) == topology.brute_force_bisection_links(topology.build(name, n))


@pytest.mark.parametrize(("name", "n"), SMALL + [("torus_3d", 64)])
def test_link_count_matches_the_graph(name, n):
    """Cables: an edge of capacity c is c unit links."""
    graph = topology.build(name, n)
    assert topology.link_count(name, n) == sum(c for _, _, c in graph.edges)


def test_hand_worked_values():
    """64 GPUs at 50 GB/s per link: ring 100 GB/s; 8×8 torus 16 links = 800 GB/s; fat tree 32 links."""
    assert topology.bisection_bandwidth("ring", 64, 50e9) == 100e9
    assert topology.bisection_bandwidth("torus_2d", 64, 50e9) == 800e9
    assert topology.bisection_bandwidth("fat_tree", 64, 50e9) == 32 * 50e9
    assert topology.bisection_bandwidth("fully_connected", 64, 50e9) == 32 * 32 * 50e9
    assert topology.bisection_bandwidth("tree", 64, 50e9) == 50e9
    assert topology.diameter("torus_3d", 512) == 12
    assert topology.link_count("fully_connected", 64) == 2016


@pytest.mark.parametrize(
    ("name", "n", "match"),
    [
        ("torus_2d", 10, "k\\^2"),
        ("fat_tree", 12, "power of two"),
        ("ring", 2, ">= 3"),
        ("mesh", 8, "topology"),
    ],
)
def test_bad_sizes_say_what_is_allowed(name, n, match):
    with pytest.raises(ValueError, match=match):
        topology.bisection_bandwidth(name, n, 1.0)
