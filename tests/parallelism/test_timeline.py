"""Do timelines read idle and exposed time right, and does the raster paint each box where it belongs?"""

import numpy as np
import pytest

from mlsys_lab.parallelism.timeline import (
    BACKWARD_RGB,
    FORWARD_RGB,
    Event,
    stream_idle_fraction,
    timeline_raster,
    timeline_summary,
)


def test_timeline_summary_hand_example():
    events = [Event("compute", 0, 2, "a", "forward"), Event("comm", 1, 4, "c", "all_reduce"),
              Event("compute", 3, 5, "b", "forward")]
    s = timeline_summary(events)
    assert s["total_s"] == 5 and s["compute_busy_s"] == 4 and s["exposed_comm_s"] == 1
    assert stream_idle_fraction(events) == pytest.approx(1 - (4 + 3) / (2 * 5))


def test_raster_paints_boxes_with_an_edge_and_leaves_gaps_white():
    """4 pixels over 4 s: forward 'a' (odd label: the 0.78 shade) on pixels 0-1, backward 'b' on pixel 3."""
    events = [Event("s0", 0, 2, "a", "forward"), Event("s1", 3, 4, "b", "backward")]
    image = timeline_raster(events, ["s0", "s1"], n_px=4, t_end=4)
    assert image.shape == (2, 4, 3)
    np.testing.assert_allclose(image[0, 0], np.array(FORWARD_RGB) * 0.78)
    np.testing.assert_allclose(image[0, 1], np.array(FORWARD_RGB) * 0.55)  # the edge
    np.testing.assert_allclose(image[0, 2:], 1.0)
    np.testing.assert_allclose(image[1, :3], 1.0)
    np.testing.assert_allclose(image[1, 3], np.array(BACKWARD_RGB) * 0.55)  # one pixel: all edge
    with pytest.raises(ValueError, match="events must be a non-empty list"):
        timeline_raster([], ["s0"])
