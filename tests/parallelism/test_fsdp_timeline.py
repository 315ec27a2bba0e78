"""Does prefetching hide FSDP's gathers, at the price of a second gathered layer; what does hybrid sharding cost?"""

import pytest

from mlsys_lab.parallelism.fsdp_timeline import Interconnect, fsdp_state_bytes, fsdp_timeline
from mlsys_lab.parallelism.timeline import timeline_summary

LAYER_BYTES, FORWARD_S = [400e6] * 8, [3e-3] * 8


def test_without_prefetch_every_gather_is_exposed_and_one_layer_is_held():
    events, peak = fsdp_timeline(LAYER_BYTES, FORWARD_S, 4, prefetch=False)
    s = timeline_summary(events)
    assert s["exposed_comm_s"] == pytest.approx(s["comm_s"]) and s["compute_busy_s"] == pytest.approx(3 * 8 * 3e-3)
    assert peak == 400e6
    assert sum(e.kind == "all_gather" for e in events) == 16 and sum(e.kind == "reduce_scatter" for e in events) == 8


def test_prefetch_hides_gathers_when_compute_is_longer_and_holds_two_layers():
    plain, _ = fsdp_timeline(LAYER_BYTES, FORWARD_S, 4, prefetch=False)
    events, peak = fsdp_timeline(LAYER_BYTES, FORWARD_S, 4, prefetch=True)
    s = timeline_summary(events)
    first_gather = next(e for e in events if e.kind == "all_gather").seconds
    assert peak == 2 * 400e6
    # exposed: only the gather that opens each pass and the last reduce-scatter
    assert s["exposed_comm_s"] == pytest.approx(3 * first_gather)
    assert s["exposed_comm_s"] < 0.2 * timeline_summary(plain)["exposed_comm_s"]
    assert s["total_s"] >= s["compute_busy_s"] + first_gather


def test_hybrid_sharding_keeps_gathers_in_the_node_and_costs_memory():
    slow = Interconnect(n_channels=1)
    full, _ = fsdp_timeline(LAYER_BYTES, FORWARD_S, 4, slow, prefetch=True)
    hybrid, _ = fsdp_timeline(LAYER_BYTES, FORWARD_S, 4, slow, prefetch=True, hybrid=True)
    assert timeline_summary(hybrid)["total_s"] < timeline_summary(full)["total_s"]
    assert sum(e.kind == "all_reduce" for e in hybrid) == 8
    assert fsdp_state_bytes(7e9, 4, slow, hybrid=True) == 4 * fsdp_state_bytes(7e9, 4, slow) == 16 * 7e9 / 8


def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="one entry per layer"):
        fsdp_timeline([1.0, 2.0], [1.0], 1)
    with pytest.raises(ValueError, match="n_nodes"):
        fsdp_timeline([1.0], [1.0], 0)
    with pytest.raises(ValueError, match="n_channels"):
        Interconnect(n_channels=0)
