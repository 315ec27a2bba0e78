"""Does the one loader find every recorded measurement, name its machine and date, and refuse unknown names?"""

import pytest

from mlsys_lab import records


def test_every_record_loads_and_says_where_it_was_measured():
    assert len(records.names()) >= 20
    for name in records.names():
        record = records.load(name)
        assert isinstance(record, dict) and records.provenance(record)
    assert records.provenance(records.load("probe_h200")).startswith("NVIDIA H200")
    assert records.load("probe_h200.json") == records.load("probe_h200")


def test_unknown_names_are_refused_with_the_list():
    with pytest.raises(ValueError, match="name must be one of the recorded measurements.*probe_h200"):
        records.load("nope")
    with pytest.raises(TypeError, match="name must be a record name"):
        records.load(3)
    assert not records.exists("nope") and records.exists("probe_h200")
