"""Do the data-path helpers read the presets right and refuse to measure a GPU that is not there?"""

import pytest

from mlsys_lab import backend
from mlsys_lab.collectives import datapaths
from mlsys_lab.hardware import A100_80GB, H200


def test_link_ratios_from_the_presets():
    assert datapaths.link_ratio(H200, "NVLink 4", "PCIe 5 x16") == pytest.approx(450 / 64)
    assert datapaths.link_ratio(A100_80GB, "NVLink 3", "PCIe 4 x16") == pytest.approx(300 / 32)
    with pytest.raises(ValueError, match="fast"):
        datapaths.link_ratio(H200, "NVLink 9", "PCIe 5 x16")


def test_host_copy_is_a_positive_rate():
    assert datapaths.measure_host_copy(2**20, repeat=3) > 0


@pytest.mark.skipif(backend.on_gpu, reason="a GPU is present")
def test_host_to_device_needs_a_gpu():
    with pytest.raises(ValueError, match="needs a GPU"):
        datapaths.measure_host_to_device(2**20)
