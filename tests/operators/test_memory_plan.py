"""Liveness, memory planning and allocator simulation against hand-worked tables."""

import numpy as np
import pytest

from mlsys_lab.operators import exp, relu, tanh, trace
from mlsys_lab.operators import memory_plan as mem
from mlsys_lab.operators.memory_plan import Interval


def chain3(x):
    return relu(tanh(exp(x)))


def test_liveness_of_a_chain_by_hand():
    """exp at step 0 is read by tanh at 1; tanh read by relu at 2; relu is the output (live to the end)."""
    intervals = mem.liveness(trace(chain3, (4, 4)))
    assert [(iv.start, iv.end, iv.n_bytes) for iv in intervals] == [(0, 1, 64), (1, 2, 64), (2, 2, 64)]
    assert mem.lower_bound_bytes(intervals) == 128
    assert mem.no_reuse_bytes(intervals) == 192


def test_greedy_by_size_hand_example_reaches_the_bound():
    """A(100) 0-1, B(50) 1-2, C(100) 2-3: C can take A's place, B sits above: arena 150 + alignment."""
    intervals = [Interval("A", 0, 1, 100), Interval("B", 1, 2, 50), Interval("C", 2, 3, 100)]
    offsets = mem.plan_greedy_by_size(intervals, alignment=1)
    assert offsets["A"] == offsets["C"] == 0 and offsets["B"] == 100
    assert mem.arena_bytes(intervals, offsets) == 150 == mem.lower_bound_bytes(intervals)


def test_greedy_plans_are_valid_and_between_bound_and_no_reuse_on_random_tables():
    rng = np.random.default_rng()
    for _ in range(30):
        n = int(rng.integers(2, 25))
        starts = rng.integers(0, 20, n)
        intervals = [
            Interval(f"t{i}", int(s), int(s + rng.integers(0, 6)), int(rng.integers(1, 5000)))
            for i, s in enumerate(starts)
        ]
        offsets = mem.plan_greedy_by_size(intervals, alignment=1)
        assert mem.plan_conflicts(intervals, offsets) == []
        arena = mem.arena_bytes(intervals, offsets)
        assert mem.lower_bound_bytes(intervals) <= arena <= mem.no_reuse_bytes(intervals)


def test_conflicts_are_found_and_missing_offsets_rejected():
    intervals = [Interval("A", 0, 2, 10), Interval("B", 1, 3, 10)]
    assert mem.plan_conflicts(intervals, {"A": 0, "B": 5}) == [("A", "B")]
    assert mem.plan_conflicts(intervals, {"A": 0, "B": 10}) == []
    with pytest.raises(ValueError, match="missing B"):
        mem.plan_conflicts(intervals, {"A": 0})


def test_caching_allocator_allocates_only_in_the_first_iteration():
    graph = trace(chain3, (32, 32))
    events = mem.allocation_events(graph, n_iterations=10)
    naive = mem.simulate_naive_allocator(events)
    cached = mem.simulate_caching_allocator(events)
    assert naive.device_allocations == 30 and naive.device_frees == 30
    assert (
        cached.device_allocations
        == mem.simulate_caching_allocator(mem.allocation_events(graph, 1)).device_allocations
    )
    assert cached.device_allocations <= 3


def test_caching_allocator_rounds_to_blocks():
    events = [("alloc", "a", 100), ("free", "a", 100), ("alloc", "b", 300), ("free", "b", 300)]
    stats = mem.simulate_caching_allocator(events, block_bytes=512)
    assert stats.device_allocations == 1 and stats.peak_reserved_bytes == 512
    assert mem.simulate_caching_allocator(events, block_bytes=64).device_allocations == 2
    with pytest.raises(ValueError, match="block_bytes"):
        mem.simulate_caching_allocator(events, block_bytes=0)
