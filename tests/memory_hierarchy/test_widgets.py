"""Does the warp-access explorer show the simt counts, and refuse what shared memory cannot do?"""

from __future__ import annotations

from mlsys_lab.memory_hierarchy.simt import SPACES
from mlsys_lab.widgets.memory_hierarchy import WarpAccessExplorer


def test_explorer_counts_sectors_and_passes():
    explorer = WarpAccessExplorer()
    assert explorer.readout["sectors"] == "4" and explorer.readout["efficiency"] == "100%"
    explorer.set(stride=8)
    assert explorer.readout["sectors"] == "32" and explorer.readout["efficiency"] == "12%"
    explorer.set(space=SPACES[1], stride=32)
    assert explorer.readout["conflict"] == "32-way"
    explorer.set(stride=33)
    assert explorer.readout["conflict"] == "1-way"


def test_explorer_counts_wide_shared_accesses_and_broadcasts():
    """float4 tile[lane]: 4 passes, the fewest 512 bytes take; stride 2 doubles them; a broadcast is 1 pass."""
    explorer = WarpAccessExplorer()
    explorer.set(space=SPACES[1], element_bytes=16, stride=1)
    assert explorer.readout["passes (wavefronts)"] == "4" and explorer.readout["conflict"] == "1-way"
    explorer.set(stride=2)
    assert explorer.readout["passes (wavefronts)"] == "8" and explorer.readout["conflict"] == "2-way"
    explorer.set(stride=0)
    assert explorer.readout["passes (wavefronts)"] == "1" and explorer.readout["relative speed"] == "100%"
