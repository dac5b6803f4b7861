"""Unit tests of :mod:`eventhubs_spark.source.batch_reader`."""

from __future__ import annotations

import json

import pytest

from eventhubs_spark.errors import OptionError
from eventhubs_spark.source import EventHubsBatchReader
from tests.unit.support.planning import CONN, Table, ranges


def test_a_batch_read_stops_at_the_end_it_found_and_checks_its_ending_positions():
    table = Table({"0": (0, 50), "1": (10, 20)})
    batch = EventHubsBatchReader({"eventhubs.connectionString": CONN}, metadata=lambda: table)
    assert ranges(batch.partitions()) == [("0", 0, 50), ("1", 10, 20)]
    ending = {"eventhubs.connectionString": CONN, "eventhubs.endingPositions": json.dumps({"1": {"seqNo": 15}})}
    assert ranges(EventHubsBatchReader(ending, metadata=lambda: table).partitions()) == [("0", 0, 50), ("1", 10, 15)]
    wrong = {"eventhubs.connectionString": CONN, "eventhubs.startingPositions": json.dumps({"7": {"seqNo": 1}})}
    with pytest.raises(OptionError, match="no partition"):
        EventHubsBatchReader(wrong, metadata=lambda: table).partitions()
