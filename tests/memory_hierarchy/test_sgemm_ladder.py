"""Does the ladder's evidence agree with hand-worked occupancy and bank counts (and, on a GPU, with the driver)?"""

from __future__ import annotations

import pytest

from mlsys_lab import backend, records
from mlsys_lab.kernels import loader
from mlsys_lab.kernels.memory_hierarchy import sgemm
from mlsys_lab.memory_hierarchy import sgemm_ladder
from mlsys_lab.memory_hierarchy.sgemm_ladder import occupancy, shared_requests

needs_gpu = pytest.mark.skipif(not backend.on_gpu, reason="needs a CUDA GPU (CuPy backend)")


@pytest.mark.parametrize("regs, threads, smem, blocks, warps, limiter", [
    (255, 128, 16384, 2, 8, "registers"),  # 256 x 32 = 8192 registers a warp: 2 warps per 16,384-register quarter
    (130, 256, 8192, 1, 8, "registers"),  # 130 rounds up to 136 a thread: 3 warps a quarter, 12 < 2 x 8
    (127, 256, 8192, 2, 16, "registers"),  # 128 a thread: 4 warps a quarter, exactly two blocks of 8
    (32, 1024, 0, 2, 64, "warps"),  # full: 64 warps
    (64, 128, 100 * 1024, 2, 8, "shared memory"),  # 101 KB with the reserved 1 KB: two fit in 228 KB
    (16, 32, 0, 32, 32, "blocks"),  # 32 one-warp blocks: the block limit, half the warp slots
])
def test_occupancy_matches_hand_worked_cases(regs, threads, smem, blocks, warps, limiter):
    result = occupancy(regs, threads, smem)
    assert (result.blocks_per_sm, result.warps_per_sm, result.limited_by) == (blocks, warps, limiter)
    assert result.fraction == warps / 64


@pytest.mark.parametrize("bad, match", [((0, 128, 0), "registers_per_thread"), ((256, 128, 0), "registers_per_thread"),
                                        ((32, 0, 0), "threads_per_block"), ((32, 2048, 0), "threads_per_block"),
                                        ((32, 128, -1), "shared_bytes_per_block")])
def test_occupancy_names_the_bad_parameter(bad, match):
    with pytest.raises(ValueError, match=match):
        occupancy(*bad)


def test_blocktile_2d_is_two_way_on_as_and_four_way_on_bs():
    """Worked by hand: a warp is thread rows 0-1 x columns 0-15. As[(row*8 + i)*8 + k]: rows 0 and 1 are 64 words
    apart, same bank, two words; Bs[k*128 + col*8 + j]: columns c and c+4 are 32 words apart, 16 words on 4 banks."""
    passes = {r.label: (r.passes, r.ideal) for r in shared_requests("blocktile_2d")}
    assert passes["As[row*TM+i][k] read"] == (2, 1)
    assert passes["Bs[k][col*TN+j] read"] == (4, 1)
    assert passes["As store"] == passes["Bs store"] == (1, 1)


def test_float4_reads_and_transposed_stores_of_the_later_steps():
    vectorized = {r.label: (r.passes, r.ideal) for r in shared_requests("vectorized")}
    assert vectorized["Bs store (float4)"] == (4, 4)  # 512 contiguous bytes: 4 passes is the minimum
    assert vectorized["Bs[k][col*TN+j] read (float4)"] == (4, 2)  # 16 float4 at a stride of 8 words: 2-way
    assert vectorized["As store (transposed, 4 B)"] == (2, 1)  # BK = 8: lanes 2j and 2j+1 one bank apart by 128 words
    warptile = {r.label: (r.passes, r.ideal) for r in shared_requests("warptile")}
    assert warptile["As store (transposed, 4 B)"] == (4, 1)  # BK = 16: four lanes share each bank
    assert shared_requests("naive") == [] and shared_requests("coalesced") == []


def test_evidence_covers_every_recorded_step():
    record = records.load("memory_h200")["sgemm"]
    rows = sgemm_ladder.ladder_evidence(record)
    assert [r.step for r in rows] == [s["step"] for s in record["steps"]]
    by_step = {r.step: r for r in rows}
    assert by_step["double_buffer"].occupancy.warps_per_sm == 2 * by_step["warptile"].occupancy.warps_per_sm


@needs_gpu
def test_occupancy_agrees_with_the_driver_for_every_step():
    xp = backend.xp
    for step in sgemm.STEPS.values():
        fn = loader.kernel(sgemm.SOURCE, step.expression)
        regs = fn.attributes["num_regs"]
        ours = occupancy(regs, step.threads, fn.attributes["shared_size_bytes"]).blocks_per_sm
        driver = xp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.kernel.ptr, step.threads, 0)
        assert ours == driver, (step.name, regs)
