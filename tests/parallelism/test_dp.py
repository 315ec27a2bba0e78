"""Does data parallelism give the single-device gradients, and does DDP's overlap hide communication?"""

import pytest

from mlsys_lab.collectives.cost import allreduce_time
from mlsys_lab.parallelism import comm
from mlsys_lab.parallelism.dp import data_parallel_grads, ddp_timeline
from mlsys_lab.parallelism.model import loss_and_grads, max_relative_error_of_params, n_params
from mlsys_lab.parallelism.timeline import timeline_summary


@pytest.mark.parametrize("n_ranks", [1, 2, 4])
def test_dp_equals_single_device(block_problem, block_config, n_ranks):
    blocks, x, t = block_problem(100 + n_ranks)
    loss, grads = loss_and_grads(x, t, blocks, block_config.head_dim)
    log = comm.CommLog()
    got_loss, got = data_parallel_grads(x, t, blocks, block_config.head_dim, n_ranks, log)
    assert got_loss == pytest.approx(loss, rel=1e-12)
    assert max_relative_error_of_params(got, grads) < 1e-10
    assert log.total_bytes == 2 * (n_ranks - 1) / n_ranks * n_params(blocks) * 8  # one ring all-reduce of Ψ


def test_dp_needs_the_batch_divided(block_problem, block_config):
    blocks, x, t = block_problem(9)
    with pytest.raises(ValueError, match="n_ranks must divide the batch size"):
        data_parallel_grads(x, t, blocks, block_config.head_dim, 3)


def test_ddp_overlap_hides_communication():
    """Bucketed all-reduce overlapped with backward exposes less than all-reduce after backward."""
    layer_s, layer_bytes = [1e-3] * 8, [25e6] * 8
    args = dict(bucket_bytes=50e6, n_ranks=8, bandwidth_bytes_per_s=50e9)
    late = timeline_summary(ddp_timeline(layer_s, layer_bytes, overlap=False, **args))
    early = timeline_summary(ddp_timeline(layer_s, layer_bytes, overlap=True, **args))
    one_bucket = 14 * 5e-6 + 2 * 7 / 8 * 50e6 / 50e9  # ring: 2(p−1)·α + 2(p−1)/p·n/B = 1.82 ms
    assert one_bucket == pytest.approx(allreduce_time("ring", 50e6, 8, 5e-6, 1 / 50e9))
    assert late["exposed_comm_s"] == pytest.approx(4 * one_bucket)
    # buckets are ready every 2 ms and each takes 1.82 ms: only the last one sticks out past backward
    assert early["exposed_comm_s"] == pytest.approx(one_bucket)
    assert early["compute_busy_s"] == pytest.approx(8e-3)


def test_ddp_events_name_layers_and_buckets():
    events = ddp_timeline([1.0, 1.0, 1.0], [10.0, 10.0, 10.0], bucket_bytes=20, n_ranks=2,
                          bandwidth_bytes_per_s=10.0, latency_s=0.0)
    assert [e.label for e in events] == ["bwd L2", "bwd L1", "bwd L0", "all-reduce L2,L1", "all-reduce L0"]
    comm_events = [e for e in events if e.stream == "comm"]
    assert [(e.start, e.end) for e in comm_events] == [(2.0, 4.0), (4.0, 5.0)]  # 2(p−1)/p·n/B = n/B
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        ddp_timeline([1.0], [1.0], 1.0, 2, bandwidth_bytes_per_s=0)
