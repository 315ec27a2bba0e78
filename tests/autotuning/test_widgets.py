"""Does the search explorer replay a strategy on the recorded space and read out its sample efficiency?"""

from __future__ import annotations

from mlsys_lab.widgets.autotuning import SearchExplorer


def test_explorer_reads_out_the_replayed_curves():
    explorer = SearchExplorer()
    explorer.set(strategy="model: raw config", budget=20, seeds=5)
    assert explorer.error is None and explorer.result["curves"].shape == (5, 20)
    assert float(explorer.readout["median best/optimum at budget"]) >= 1.0
    assert explorer.readout["seeds within 5% of best"].endswith("%")
