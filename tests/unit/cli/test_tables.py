"""Unit tests of :mod:`eventhubs_spark.cli.tables`."""

from __future__ import annotations

from eventhubs_spark.cli.tables import table


def test_columns_are_as_wide_as_their_widest_cell_and_right_aligned():
    assert table(["partition", "lag"], [["0", 12345], ["10", 7]]).splitlines() == [
        "partition    lag",
        "        0  12345",
        "       10      7",
    ]
    assert table(["partition"], []) == "partition"
