"""Is a pipeline of dedicated units paced by its slowest stage?"""

import pytest

from mlsys_lab.operators.schedule import pipeline_times


def test_pipeline_is_paced_by_the_slowest_stage():
    times = pipeline_times([4.0, 1.0, 1.0], n_items=1000)
    assert times.serial_seconds == 6000.0
    assert times.pipelined_seconds == 6.0 + 999 * 4.0
    assert times.utilisation[0] == pytest.approx(4000 / 4002)
    with pytest.raises(ValueError, match="stage_seconds"):
        pipeline_times([], 3)
